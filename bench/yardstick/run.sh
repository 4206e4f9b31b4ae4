#!/usr/bin/env bash
# A user's yardstick: train the same GPT-2 graphs with tmmu's cpu and webgpu
# executors and with PyTorch on the CPU, and print steps/s side by side.
#
#   bench/yardstick/run.sh
#
# Environment (all optional):
#   PYTHON        the interpreter with PyTorch (default: /usr/bin/python3,
#                 else python3, whichever imports torch)
#   THREADS       PyTorch intra-op threads (default: the number of cores,
#                 as tmmu's cpu executor runs its kernels on every core)
#   TINY_STEPS    steps for the tiny GPT-2 (default 20)
#   VOCAB_STEPS   steps for the vocab-50257 GPT-2 (default 3)
#   SKIP_WEBGPU=1 leave the webgpu executor out
#   TIMEOUT       seconds each run may take before it is stopped and shown
#                 as "timeout" (default 300; needs coreutils' timeout)
#
# Every run trains the same number of steps from the same initialisation on
# the same synthetic batches, so the losses of the first and last step must
# agree between tmmu and PyTorch (printed under the table). See README.md
# for what each steps/s includes.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"

THREADS=${THREADS:-$(nproc 2>/dev/null || echo 1)}
TINY_STEPS=${TINY_STEPS:-20}
VOCAB_STEPS=${VOCAB_STEPS:-3}
SKIP_WEBGPU=${SKIP_WEBGPU:-0}
TIMEOUT=${TIMEOUT:-300}

die() { echo "yardstick: $*" >&2; exit 2; }

command -v go >/dev/null || die "go is not on PATH (needed to build tmmu)"

# An interpreter that has PyTorch.
PY=""
for c in ${PYTHON:-/usr/bin/python3 python3}; do
  if command -v "$c" >/dev/null && "$c" -c 'import torch, numpy' 2>/dev/null; then PY=$c; break; fi
done
if [ -z "$PY" ]; then
  die "no Python with PyTorch and numpy found (tried: ${PYTHON:-/usr/bin/python3 python3}).
  On Debian/Ubuntu: sudo apt-get install -y python3-torch   (then run with /usr/bin/python3)
  Elsewhere:        pip install torch numpy                 (and set PYTHON=/path/to/python)"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/yardstick.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# field FILE JQ-FILTER PYTHON-EXPRESSION (d is the parsed JSON)
field() {
  if command -v jq >/dev/null; then
    jq -r "$2" "$1"
  else
    "$PY" -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$3"
  fi
}

echo "building tmmu ..." >&2
go build -o "$tmp/tmmu" ./cmd/tmmu
tmmu=$tmp/tmmu

# configs: name layers hidden heads seq batch vocab steps
configs=(
  "gpt2-tiny 2 64 4 32 2 64 $TINY_STEPS"
  "gpt2-vocab50257 1 64 4 32 2 50257 $VOCAB_STEPS"
)

# Is there a WebGPU adapter? "auto" falls back to cpu and says why.
webgpu=1 webgpu_note=""
if [ "$SKIP_WEBGPU" = 1 ]; then
  webgpu=0 webgpu_note="webgpu skipped (SKIP_WEBGPU=1)"
else
  "$tmmu" gen gpt2 --train --layers 1 --hidden 8 --heads 1 --seq 2 --context 2 --batch 1 --vocab 4 --out "$tmp/probe.json"
  if "$tmmu" train "$tmp/probe.json" --executor auto --steps 1 -o json >"$tmp/probe.out" 2>"$tmp/probe.err" &&
     [ "$(field "$tmp/probe.out" .backend 'd["backend"]')" = webgpu ]; then
    webgpu_note="webgpu adapter: $(field "$tmp/probe.out" .device 'd["device"]')"
  else
    webgpu=0
    webgpu_note="webgpu n/a: $(grep -v XDG_RUNTIME_DIR "$tmp/probe.err" | tail -n 1) (a CPU adapter needs e.g. mesa-vulkan-drivers)"
  fi
fi

# run LOG OUT CMD...: stdout to OUT, stderr to LOG, at most TIMEOUT
# seconds; on failure show LOG and set why to "fail" or "timeout".
limit=()
command -v timeout >/dev/null && limit=(timeout "$TIMEOUT")
run() {
  local log=$1 out=$2 rc=0; shift 2
  ${limit[@]+"${limit[@]}"} "$@" >"$out" 2>"$log" || rc=$?
  [ "$rc" = 0 ] && return 0
  if [ "$rc" = 124 ] && [ ${#limit[@]} -gt 0 ]; then
    why=timeout
    echo "yardstick: timed out after ${TIMEOUT}s: $*" >&2
  else
    why=fail
    echo "yardstick: failed (exit $rc): $*" >&2
  fi
  grep -v XDG_RUNTIME_DIR "$log" | tail -n 5 >&2
  return 1
}

# fmt X [FORMAT]: a number in FORMAT (default 3 significant digits); words as they are.
fmt() { case "$1" in fail|timeout|n/a|-) echo "$1" ;; *) awk -v x="$1" -v f="${2:-%.3g}" 'BEGIN { printf f, x }' ;; esac; }

rows=() checks=()
for cfg in "${configs[@]}"; do
  read -r name L H A S B V N <<<"$cfg"
  ir=$tmp/$name.json
  "$tmmu" gen gpt2 --train --layers "$L" --hidden "$H" --heads "$A" --seq "$S" --context "$S" --batch "$B" --vocab "$V" --out "$ir"
  ir_params=$(field "$ir" '[.tensors[]|select(.role=="parameter")|.shape|reduce .[] as $x (1; .*$x)]|add' \
    'sum(__import__("math").prod(t["shape"]) for t in d["tensors"] if t["role"] == "parameter")')

  echo "$name: tmmu cpu, $N steps ..." >&2
  cpu_l1=- cpu_ln=-
  if run "$tmp/$name.cpu.err" "$tmp/$name.cpu.json" "$tmmu" train "$ir" --executor cpu --steps "$N" -o json; then
    cpu=$(field "$tmp/$name.cpu.json" .steps_per_second 'd["steps_per_second"]')
    cpu_l1=$(field "$tmp/$name.cpu.json" '.steps[0].loss' 'd["steps"][0]["loss"]')
    cpu_ln=$(field "$tmp/$name.cpu.json" '.steps[-1].loss' 'd["steps"][-1]["loss"]')
  else
    cpu=$why
  fi

  wg=n/a wg_l1=- wg_ln=-
  if [ "$webgpu" = 1 ]; then
    echo "$name: tmmu webgpu, $N steps ..." >&2
    if run "$tmp/$name.wg.err" "$tmp/$name.wg.json" "$tmmu" train "$ir" --executor webgpu --steps "$N" -o json; then
      wg=$(field "$tmp/$name.wg.json" .steps_per_second 'd["steps_per_second"]')
      wg_l1=$(field "$tmp/$name.wg.json" '.steps[0].loss' 'd["steps"][0]["loss"]')
      wg_ln=$(field "$tmp/$name.wg.json" '.steps[-1].loss' 'd["steps"][-1]["loss"]')
    else
      wg=$why
    fi
  fi

  # PyTorch: the first step is warm-up (untimed), the other N-1 are timed,
  # so it trains the same N steps as tmmu.
  echo "$name: pytorch, 1 + $((N - 1)) steps, $THREADS thread(s) ..." >&2
  pt_l1=- pt_ln=- pt_params=-
  if run "$tmp/$name.pt.err" "$tmp/$name.pt.json" "$PY" bench/yardstick/pytorch_gpt2.py \
      --layers "$L" --hidden "$H" --heads "$A" --seq "$S" --batch "$B" --vocab "$V" \
      --warmup 1 --steps $((N > 1 ? N - 1 : 1)) --threads "$THREADS"; then
    pt=$(field "$tmp/$name.pt.json" .steps_per_second 'd["steps_per_second"]')
    pt_l1=$(field "$tmp/$name.pt.json" .first_loss 'd["first_loss"]')
    pt_ln=$(field "$tmp/$name.pt.json" .last_loss 'd["last_loss"]')
    pt_params=$(field "$tmp/$name.pt.json" .parameters 'd["parameters"]')
  else
    pt=$why
  fi

  ratio=-
  case "$cpu$pt" in *fail*|*timeout*) ;; *) ratio=$(awk -v a="$pt" -v b="$cpu" 'BEGIN { printf "%.1fx", a / b }') ;; esac
  rows+=("$(printf '%-16s %14s %17s %16s %18s' "$name" "$(fmt "$cpu")" "$(fmt "$wg")" "$(fmt "$pt")" "$ratio")")
  checks+=("$(printf '%-16s %10s %10s %6s %9s %9s %9s   %9s %9s %9s' "$name" "$ir_params" "$pt_params" "$N" \
    "$(fmt "$cpu_l1" %.5f)" "$(fmt "$wg_l1" %.5f)" "$(fmt "$pt_l1" %.5f)" "$(fmt "$cpu_ln" %.5f)" "$(fmt "$wg_ln" %.5f)" "$(fmt "$pt_ln" %.5f)")")
done

echo
echo "$(date -u +%Y-%m-%dT%H:%MZ), $(nproc 2>/dev/null || echo ?) cores, $(uname -m); $($PY -c 'import torch; print("pytorch", torch.__version__)'), $THREADS thread(s)"
echo "$webgpu_note"
echo
printf '%-16s %14s %17s %16s %18s\n' config "tmmu cpu st/s" "tmmu webgpu st/s" "PyTorch st/s" "PyTorch/tmmu-cpu"
printf '%s\n' "${rows[@]}"
echo
echo "same model? parameters (tmmu IR, PyTorch) and loss of the first and last step (tmmu cpu, tmmu webgpu, PyTorch):"
printf '%-16s %10s %10s %6s %9s %9s %9s   %9s %9s %9s\n' config "params IR" "params PT" steps "cpu@1" "wgpu@1" "PT@1" "cpu@N" "wgpu@N" "PT@N"
printf '%s\n' "${checks[@]}"
echo
echo "tmmu steps/s: all N steps, the first included, each feeding the batch and reading back the loss; the state hash sealed after the last step is not timed."
echo "PyTorch steps/s: steps 2..N (step 1 is untimed warm-up); no state hashing (pytorch_gpt2.py --seal adds it)."
