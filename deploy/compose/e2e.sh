#!/usr/bin/env bash
# The fault script: against the running compose cluster (make up), it
# injects one fault at a time and checks, with tmmu status and tmmu job
# history, that the demo job goes on: new steps are committed, every epoch
# is still agreed, and the history committed before the fault is still
# there, unchanged. At the end it checks what users would lose: the model
# state. One line per check; exits 1 if any fails.
#
#   1. SIGKILL the raft leader's container (and start it again)
#   2. cut one coordinator off the network (a minority partition), heal it
#   3. SIGKILL NATS, start it again after 5 s
#   4. SIGKILL etcd, start it again after 5 s
#   5. restart 2 of the 3 coordinators
#   6. SIGKILL worker w2, start it again after $WORKER_DOWN seconds (90)
#   7. SIGKILL worker w3 and replace its container by a new one (same identity)
#   8. an operator replan with tmmu replan
#
# Before the faults, the attacks of issue 16 (tmmu probe, in the cluster's
# network, with the credentials of one worker identity no running worker
# holds and the API token): every one must be refused, nothing forged
# committed, the counter of each refusal moved, and the job must go on;
# and from the host, etcd must refuse a client without a certificate.
#
# Model state: every checkpoint a worker stored, each time it ran (a
# rollback runs steps again), has one state hash and one loss per rank and
# step, the ones the committed checkpoints record; the loss never jumps
# back (a worker restarted from fresh weights would log ~4.2 again); and
# no container was restarted by Docker (its restart count is 0): every
# restart above is the script's own.
set -uo pipefail
cd "$(dirname "$0")"
COMPOSE=${COMPOSE:-$(docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)}
export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-tmmu}
# The operator's credentials, as paths (make secrets writes them).
export TMMU_CA_FILE=$PWD/secrets/ca.crt TMMU_TOKEN_FILE=$PWD/secrets/operator/api-token
export TMMU_COORDINATORS=https://127.0.0.1:18081,https://127.0.0.1:18082,https://127.0.0.1:18083
TMMU=bin/tmmu
JOB=demo
WORKER_DOWN=${WORKER_DOWN:-90}
LOGS=$(mktemp -d)
failed=0

say() { printf '%s\n' "$*"; }
pass() { say "PASS  $*"; }
fail() { say "FAIL  $*"; failed=1; }

status() { $TMMU status -o json --timeout 5s 2>/dev/null; }
history() { $TMMU job history "$JOB" -o json --timeout 5s 2>/dev/null; }
epochs() { history | jq -c '.epochs' 2>/dev/null; }
# last_step: the job's committed step (asked up to 5 times: a coordinator
# may be restarting).
last_step() {
  local s i
  for i in 1 2 3 4 5; do
    s=$(status | jq -r --arg j "$JOB" '.jobs[] | select(.name == $j) | .last_step' 2>/dev/null)
    if [ -n "$s" ] && [ "$s" != null ]; then echo "$s"; return; fi
    sleep 1
  done
}
leader() { status | jq -r '.leader' 2>/dev/null; }
container() { $COMPOSE ps -q "$1"; }

# advanced FROM SECONDS: waits until the job's committed step passes
# FROM+3 (so steps are run and committed after the fault). A rollback
# lowers the committed step: FROM is lowered with it.
advanced() {
  local from=$1 deadline=$((SECONDS + $2)) s
  while [ $SECONDS -lt $deadline ]; do
    s=$(last_step)
    if [ -n "$s" ] && [ "$s" != null ]; then
      [ "$s" -lt "$from" ] && from=$s
      if [ "$s" -ge $((from + 3)) ]; then echo "$s"; return 0; fi
    fi
    sleep 1
  done
  return 1
}

# check NAME BEFORE_EPOCHS FROM T0: once the fault is over, the job
# commits 3 more steps; all its epochs are agreed; and the epochs before
# the fault are a prefix of the epochs now.
check() {
  local name=$1 before=$2 from=$3 t0=${4:-$SECONDS} s h now
  now=$(last_step)
  now=${now:-$from}
  if ! s=$(advanced "$now" 180); then
    fail "$name: the job did not advance 3 steps past step $now within 180s (at $(last_step))"
    return
  fi
  h=$(epochs)
  local n_before n_now agreed prefix
  n_before=$(jq length <<<"$before")
  n_now=$(jq length <<<"$h")
  agreed=$(jq '[.[] | .agreed] | all' <<<"$h")
  prefix=$(jq -n --argjson a "$before" --argjson b "$h" '$a == $b[0:($a|length)]')
  if [ "$agreed" != true ] || [ "$prefix" != true ]; then
    fail "$name: epochs agreed=$agreed, epochs before the fault kept=$prefix"
    return
  fi
  pass "$name: step $from before the fault, $now after it, $s committed $((SECONDS - t0))s after the fault; $n_now epoch(s), all agreed; the $n_before committed before unchanged"
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

# save_logs W: keeps a worker container's JSON log lines (before the
# container is replaced).
save_logs() { docker logs "$(container "$1")" 2>&1 | grep '^{' >>"$LOGS/$1.$(date +%s%N).jsonl"; }

./wait.sh >/dev/null || { fail "the cluster did not reach agreement"; exit 1; }
pass "start: demo job agreed and running at step $(last_step), leader $(leader)"

# 0. The attacks, then etcd from the host (through its bridge address).
before=$(epochs) from=$(last_step) t0=$SECONDS
out=$($COMPOSE run --rm probe 2>&1)
rc=$?
while IFS= read -r line; do
  case "$line" in
    REFUSED*) pass "attack refused: $(sed 's/^REFUSED *//' <<<"$line")" ;;
    ACCEPTED*) fail "attack accepted: $(sed 's/^ACCEPTED *//' <<<"$line")" ;;
  esac
done <<<"$out"
if [ $rc != 0 ] && ! grep -q '^ACCEPTED' <<<"$out"; then
  fail "attacks: tmmu probe exited $rc: $(tail -3 <<<"$out" | tr '\n' ' ')"
fi
etcd_ip=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}' "$(container etcd)" | awk '{print $1}')
plain=$(curl -s -m 5 -o /dev/null -w '%{http_code}' "http://$etcd_ip:2379/v3/kv/range" -d '{"key":"L3RtbXUv","range_end":"L3RtbXUw"}' 2>&1)
tlsnocert=$(curl -sk -m 5 -o /dev/null -w '%{http_code}' "https://$etcd_ip:2379/v3/kv/range" -d '{"key":"L3RtbXUv","range_end":"L3RtbXUw"}' 2>&1)
if [ "$plain" != 200 ] && [ "$tlsnocert" != 200 ]; then
  pass "etcd from the host ($etcd_ip:2379) without credentials: refused (plain HTTP: $plain, TLS without a client certificate: $tlsnocert)"
else
  fail "etcd from the host ($etcd_ip:2379) answered without credentials (plain HTTP: $plain, TLS without a client certificate: $tlsnocert)"
fi
check "the attacks" "$before" "$from" "$t0"

# 1. The raft leader's container is killed.
before=$(epochs) from=$(last_step) old=$(leader) t0=$SECONDS
$COMPOSE kill "$old" >/dev/null 2>&1
new=""
while [ $SECONDS -lt $((t0 + 30)) ]; do
  new=$(leader)
  if [ -n "$new" ] && [ "$new" != "$old" ] && [ "$new" != null ]; then break; fi
  sleep 0.5
done
if [ -n "$new" ] && [ "$new" != "$old" ]; then
  pass "leader SIGKILL: $old killed, $new leads after $((SECONDS - t0))s"
else
  fail "leader SIGKILL: no new leader within 30s after killing $old"
fi
check "leader SIGKILL" "$before" "$from" "$t0"
$COMPOSE start "$old" >/dev/null 2>&1
healthy "$old" && pass "leader SIGKILL: $old restarted from its raft volume and is healthy" || fail "leader SIGKILL: $old not healthy after restart"

# 2. A follower is cut off the network (a minority of one) and healed.
before=$(epochs) from=$(last_step) lead=$(leader) t0=$SECONDS
victim=c1
for c in c1 c2 c3; do [ "$c" != "$lead" ] && victim=$c; done
net=$(docker inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}' "$(container "$victim")" | awk '{print $1}')
docker network disconnect "$net" "$(container "$victim")"
check "partition of $victim (majority side)" "$before" "$from" "$t0"
docker network connect --alias "$victim" "$net" "$(container "$victim")"
t0=$SECONDS
caught=false
while [ $SECONDS -lt $((t0 + 60)) ]; do
  mine=$($TMMU status -o json --timeout 3s --coordinators "https://127.0.0.1:1808${victim#c}" 2>/dev/null | jq -r '.applied_index' 2>/dev/null)
  theirs=$(status | jq -r '.applied_index')
  if [ -n "$mine" ] && [ "$mine" != null ] && [ -n "$theirs" ] && [ "$mine" -ge $((theirs - 2)) ] 2>/dev/null; then caught=true; break; fi
  sleep 1
done
$caught && pass "partition healed: $victim back, applied index $mine (leader's $theirs) after $((SECONDS - t0))s" || fail "partition healed: $victim did not catch up within 60s"
check "after healing $victim" "$(epochs)" "$(last_step)"

# kill_for SERVICE NAME: SIGKILL a service, start it again after 5 s, check.
kill_for() {
  local before from t0
  before=$(epochs) from=$(last_step) t0=$SECONDS
  $COMPOSE kill "$1" >/dev/null 2>&1
  sleep 5
  $COMPOSE start "$1" >/dev/null 2>&1
  healthy "$1" || fail "$2 SIGKILL: not healthy again"
  check "$2 SIGKILL, back after 5s" "$before" "$from" "$t0"
}

# 3. NATS is killed and comes back after 5 s (JetStream data on its volume).
kill_for nats NATS

# 4. etcd is killed and comes back after 5 s (rank claims on its volume).
kill_for etcd etcd

# 5. Two of the three coordinators restart.
before=$(epochs) from=$(last_step) lead=$(leader) t0=$SECONDS
two=""
for c in c1 c2 c3; do [ "$c" != "$lead" ] && two="$two $c"; done
$COMPOSE restart -t 5 $two >/dev/null 2>&1
check "coordinators$two restarted" "$before" "$from" "$t0"

# 6. A worker is killed and comes back after WORKER_DOWN seconds: the
# others wait for it (none exits), then every rank rolls back to the last
# checkpoint and the job goes on.
before=$(epochs) from=$(last_step) t0=$SECONDS
$COMPOSE kill w2 >/dev/null 2>&1
sleep "$WORKER_DOWN"
$COMPOSE start w2 >/dev/null 2>&1
check "worker w2 SIGKILL, back after ${WORKER_DOWN}s" "$before" "$from" "$t0"

# 7. A worker is killed and replaced by a new container with its identity.
before=$(epochs) from=$(last_step) t0=$SECONDS
$COMPOSE kill w3 >/dev/null 2>&1
# Its logs are read once it is dead: a shard it stored and logged
# between a read and the kill could be committed, and missing here.
save_logs w3
$COMPOSE rm -f w3 >/dev/null 2>&1
$COMPOSE up -d --no-deps w3 >/dev/null 2>&1
check "worker w3 SIGKILL, replaced by a new container" "$before" "$from" "$t0"

# 8. An operator replan to the other strategy, at the next safepoint.
before=$(epochs) from=$(last_step) t0=$SECONDS
strategy=slots
[ "$(jq -r '.[-1].strategy' <<<"$before")" = slots ] && strategy=packed
out=$($TMMU replan --job "$JOB" --reason "e2e: operator asks for the $strategy layout" --strategy $strategy --id "e2e-$(date +%s)" -o json 2>&1)
if jq -e '.decision == "replan"' <<<"$out" >/dev/null 2>&1; then
  pass "operator replan: epoch $(jq -r .epoch <<<"$out") committed, switching at step $(jq -r .boundary <<<"$out")"
else
  fail "operator replan: $out"
fi
check "operator replan" "$before" "$from" "$t0"

# Model state. Let the job reach one more checkpoint, then compare what
# every worker logged with what the coordinators committed.
every=10
target=$(( ($(last_step) / every + 2) * every ))
advanced "$((target - 3))" 240 >/dev/null || fail "the job did not reach step $target"
# The committed checkpoints first, then the logs: a rank logs its shard
# once it is stored, before it reports it, so every committed shard was
# logged, also by a worker killed while its report was in flight.
committed=$(history | jq -c '[.checkpoints[] | {step, hashes: [.state_hashes[] | .[0:12]]}]')
sleep 2
for w in w0 w1 w2 w3; do save_logs "$w"; done
cat "$LOGS"/*.jsonl | jq -c 'select(.msg == "checkpoint stored") | {rank, step, state_hash, loss}' 2>/dev/null | sort -u >"$LOGS/ckpt"
n=$(wc -l <"$LOGS/ckpt")
dups=$(jq -s -c 'group_by([.rank, .step]) | map(select((map(.state_hash) | unique | length) > 1 or (map(.loss) | unique | length) > 1)) | length' "$LOGS/ckpt")
jumps=$(jq -s -c 'map(select(.rank == 0 and .loss != null)) | unique_by(.step) | sort_by(.step) | [range(1; length) as $i | select(.[$i].loss > .[$i-1].loss + 0.5) | {from: .[$i-1], to: .[$i]}] | length' "$LOGS/ckpt")
mismatch=$(jq -n --slurpfile logged <(jq -c . "$LOGS/ckpt") --argjson c "$committed" '
  [$c[] as $k | $k.hashes | to_entries[] | . as $e
   | ($logged | map(select(.step == $k.step and .rank == $e.key)) | map(.state_hash)) as $got
   | select(($got | length) == 0 or ($got | all(. == $e.value) | not))] | length')
if [ "$n" -gt 0 ] && [ "$dups" = 0 ] && [ "$jumps" = 0 ] && [ "$mismatch" = 0 ]; then
  pass "model state: $n checkpoint shards logged (replays included) agree with each other and with the $(jq length <<<"$committed") committed checkpoints; rank 0's loss at each checkpoint: $(jq -s -r 'map(select(.rank == 0 and .loss != null)) | unique_by(.step) | sort_by(.step) | map("\(.step):\(.loss * 1000 | round / 1000)") | join(" ")' "$LOGS/ckpt")"
else
  fail "model state: $n shards logged; $dups (rank, step) with two states or losses; $jumps loss jumps back; $mismatch committed shards not logged with their state hash"
fi

restarts=$(for c in $($COMPOSE ps -q); do docker inspect -f '{{.Name}} {{.RestartCount}}' "$c"; done | awk '$2 != 0')
[ -z "$restarts" ] && pass "no container was restarted by Docker (every restart count is 0)" || fail "containers restarted by Docker: $restarts"

rm -rf "$LOGS"
[ $failed = 0 ] && say "e2e: all checks passed" || say "e2e: some checks failed"
exit $failed
