#!/usr/bin/env bash
# Stress run for the WebGPU executor: several processes at once (the gpu
# and engine test binaries and `tmmu train --executor webgpu`) beside a
# CPU hog, many times over, counting the runs that failed and the ones
# that crashed (a Go panic, a fatal error or a signal).
#
#   bench/stress/webgpu.sh
#
# Environment (all optional):
#   PROCS   processes running at once (default 4)
#   RUNS    runs per process (default 10)
#   HOGS    busy-looping processes beside them (default: the cores)
#   OUT     directory for the logs (default: a temporary one, kept)
#
# Needs a WebGPU adapter (on a machine without a GPU: Debian's
# mesa-vulkan-drivers, i.e. llvmpipe). Exits 1 if any run failed.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
PROCS=${PROCS:-4}
RUNS=${RUNS:-10}
HOGS=${HOGS:-$(nproc 2>/dev/null || echo 2)}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/tmmu-stress.XXXXXX")}
mkdir -p "$OUT"
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$OUT/xdg}
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
export TMMU_REQUIRE_WEBGPU=1

echo "building into $OUT ..." >&2
go test -c -o "$OUT/gpu.test" ./gpu || exit 2
go test -c -o "$OUT/engine.test" ./engine || exit 2
go build -o "$OUT/tmmu" ./cmd/tmmu || exit 2
"$OUT/tmmu" gen gpt2 --train --layers 2 --hidden 64 --heads 4 --seq 32 --context 32 --batch 2 --vocab 64 --out "$OUT/tiny.json" || exit 2

hogs=()
for _ in $(seq "$HOGS"); do
  (while :; do :; done) &
  hogs+=($!)
done
trap 'kill "${hogs[@]}" 2>/dev/null' EXIT

# worker P: RUNS runs, cycling through the three programs.
worker() {
  local p=$1 r log rc
  for r in $(seq "$RUNS"); do
    log=$OUT/p$p-r$r.log
    case $(( (p + r) % 3 )) in
      0) "$OUT/gpu.test" -test.count=1 >"$log" 2>&1 ;;
      1) "$OUT/engine.test" -test.short -test.count=1 >"$log" 2>&1 ;;
      2) "$OUT/tmmu" train "$OUT/tiny.json" --executor webgpu --steps 20 >"$log" 2>&1 ;;
    esac
    rc=$?
    echo "$rc" >"$log.rc"
  done
}

start=$(date +%s)
workers=()
for p in $(seq "$PROCS"); do
  worker "$p" &
  workers+=($!)
done
wait "${workers[@]}"
took=$(( $(date +%s) - start ))

runs=0 failed=0 crashed=0
for rcf in "$OUT"/p*-r*.log.rc; do
  runs=$((runs + 1))
  log=${rcf%.rc}
  if [ "$(cat "$rcf")" != 0 ]; then
    failed=$((failed + 1))
    echo "failed: $log (exit $(cat "$rcf"))"
  fi
  if grep -qE '^panic:|^fatal error:|^SIGSEGV|^SIGABRT|signal (SIGSEGV|SIGABRT|SIGBUS)|runtime/cgo:' "$log"; then
    crashed=$((crashed + 1))
    echo "crashed: $log: $(grep -m1 -E '^panic:|^fatal error:|SIG|runtime/cgo:' "$log")"
  fi
done
echo "stress: $PROCS processes × $RUNS runs beside $HOGS CPU hogs in ${took}s (load average $(cut -d' ' -f1-3 /proc/loadavg)): $runs runs, $failed failed, $crashed crashed; logs in $OUT"
[ "$failed" = 0 ]
