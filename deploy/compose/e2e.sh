#!/usr/bin/env bash
# The fault script: against the running compose cluster (make up), it
# injects one fault at a time and checks, with tmmu status and tmmu job
# history, that the demo job goes on: new steps are committed, every epoch
# is still agreed, and the history committed before the fault is still
# there, unchanged. One line per check; exits 1 if any fails.
#
#   1. stop the raft leader's container (and start it again)
#   2. cut one coordinator off the network (a minority partition), heal it
#   3. restart NATS
#   4. restart etcd
#   5. kill a worker and start it again
#   6. an operator replan with tmmu replan
set -uo pipefail
cd "$(dirname "$0")"
COMPOSE=${COMPOSE:-$(docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)}
export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-tmmu}
. secrets/operator.env
export TMMU_TOKEN
export TMMU_COORDINATORS=http://127.0.0.1:18081,http://127.0.0.1:18082,http://127.0.0.1:18083
TMMU=bin/tmmu
JOB=demo
failed=0

say() { printf '%s\n' "$*"; }
pass() { say "PASS  $*"; }
fail() { say "FAIL  $*"; failed=1; }

status() { $TMMU status -o json --timeout 5s 2>/dev/null; }
history() { $TMMU job history "$JOB" -o json --timeout 5s 2>/dev/null; }
last_step() { status | jq -r --arg j "$JOB" '.jobs[] | select(.name == $j) | .last_step' 2>/dev/null; }
leader() { status | jq -r '.leader' 2>/dev/null; }
container() { $COMPOSE ps -q "$1"; }

# advanced FROM SECONDS: waits until the job's committed step passes
# FROM+3 (so steps are run and committed after the fault).
advanced() {
  local from=$1 deadline=$((SECONDS + $2)) s
  while [ $SECONDS -lt $deadline ]; do
    s=$(last_step)
    if [ -n "$s" ] && [ "$s" -ge $((from + 3)) ]; then echo "$s"; return 0; fi
    sleep 1
  done
  return 1
}

# check NAME BEFORE_HISTORY FROM: once the fault is over, the job commits
# 3 more steps; all its epochs are agreed; and the history before the
# fault is a prefix of the history now.
check() {
  local name=$1 before=$2 from=$3 s h t0=$SECONDS now
  now=$(last_step)
  now=${now:-$from}
  if ! s=$(advanced "$now" 120); then
    fail "$name: the job did not advance past step $((now + 3)) within 120s (at $(last_step))"
    return
  fi
  h=$(history)
  local n_before n_now agreed prefix
  n_before=$(jq length <<<"$before")
  n_now=$(jq length <<<"$h")
  agreed=$(jq '[.[] | .agreed] | all' <<<"$h")
  prefix=$(jq -n --argjson a "$before" --argjson b "$h" '$a == $b[0:($a|length)]')
  if [ "$agreed" != true ] || [ "$prefix" != true ]; then
    fail "$name: epochs agreed=$agreed, history before the fault kept=$prefix"
    return
  fi
  pass "$name: step $from before the fault, $now after it, $s committed $((SECONDS - t0))s later; $n_now epoch(s), all agreed; the $n_before committed before the fault unchanged"
}

healthy() {
  local c deadline=$((SECONDS + 90))
  c=$(container "$1")
  while [ $SECONDS -lt $deadline ]; do
    [ "$(docker inspect -f '{{.State.Health.Status}}' "$c" 2>/dev/null)" = healthy ] && return 0
    sleep 1
  done
  return 1
}

./wait.sh >/dev/null || { fail "the cluster did not reach agreement"; exit 1; }
pass "start: demo job agreed and running at step $(last_step), leader $(leader)"

# 1. The raft leader's container stops.
before=$(history) from=$(last_step) old=$(leader)
$COMPOSE stop -t 10 "$old" >/dev/null 2>&1
t0=$SECONDS
new=""
while [ $SECONDS -lt $((t0 + 30)) ]; do
  new=$(leader)
  if [ -n "$new" ] && [ "$new" != "$old" ] && [ "$new" != null ]; then break; fi
  sleep 0.5
done
if [ -n "$new" ] && [ "$new" != "$old" ]; then
  pass "leader stop: $old stopped, $new leads after $((SECONDS - t0))s"
else
  fail "leader stop: no new leader within 30s after stopping $old"
fi
check "leader stop" "$before" "$from"
$COMPOSE start "$old" >/dev/null 2>&1
healthy "$old" && pass "leader stop: $old restarted from its raft volume and is healthy" || fail "leader stop: $old not healthy after restart"

# 2. A follower is cut off the network (a minority of one) and healed.
before=$(history) from=$(last_step) lead=$(leader)
victim=c1
for c in c1 c2 c3; do [ "$c" != "$lead" ] && victim=$c; done
net=$(docker inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}' "$(container "$victim")" | awk '{print $1}')
docker network disconnect "$net" "$(container "$victim")"
check "partition of $victim (majority side)" "$before" "$from"
docker network connect --alias "$victim" "$net" "$(container "$victim")"
t0=$SECONDS
caught=false
while [ $SECONDS -lt $((t0 + 60)) ]; do
  mine=$($TMMU status -o json --timeout 3s --coordinators "http://127.0.0.1:1808${victim#c}" 2>/dev/null | jq -r '.applied_index' 2>/dev/null)
  theirs=$(status | jq -r '.applied_index')
  if [ -n "$mine" ] && [ "$mine" != null ] && [ -n "$theirs" ] && [ "$mine" -ge $((theirs - 2)) ] 2>/dev/null; then caught=true; break; fi
  sleep 1
done
$caught && pass "partition healed: $victim back, applied index $mine (leader's $theirs) after $((SECONDS - t0))s" || fail "partition healed: $victim did not catch up within 60s"
check "after healing $victim" "$(history)" "$(last_step)"

# 3. NATS restarts (JetStream data on its volume).
before=$(history) from=$(last_step)
$COMPOSE restart -t 5 nats >/dev/null 2>&1
healthy nats || fail "nats restart: not healthy again"
check "nats restart" "$before" "$from"

# 4. etcd restarts (rank claims on its volume; leases outlive a short restart).
before=$(history) from=$(last_step)
$COMPOSE restart -t 5 etcd >/dev/null 2>&1
healthy etcd || fail "etcd restart: not healthy again"
check "etcd restart" "$before" "$from"

# 5. A worker is killed and started again: same identity, same rank.
before=$(history) from=$(last_step)
$COMPOSE kill w2 >/dev/null 2>&1
sleep 2
$COMPOSE start w2 >/dev/null 2>&1
check "worker w2 killed and restarted" "$before" "$from"

# 6. An operator replan to the other strategy, at the next safepoint.
before=$(history) from=$(last_step)
strategy=slots
[ "$(jq -r '.[-1].strategy' <<<"$before")" = slots ] && strategy=packed
out=$($TMMU replan --job "$JOB" --reason "e2e: operator asks for the $strategy layout" --strategy $strategy --id "e2e-$(date +%s)" -o json 2>&1)
if jq -e '.decision == "replan"' <<<"$out" >/dev/null 2>&1; then
  pass "operator replan: epoch $(jq -r .epoch <<<"$out") committed, switching at step $(jq -r .boundary <<<"$out")"
else
  fail "operator replan: $out"
fi
check "operator replan" "$before" "$from"
epochs=$(history | jq length)
[ "$epochs" -gt "$(jq length <<<"$before")" ] && pass "operator replan: history has $epochs epochs, the new one agreed" || fail "operator replan: no new epoch in the history"

[ $failed = 0 ] && say "e2e: all checks passed" || say "e2e: some checks failed"
exit $failed
