#!/usr/bin/env bash
# Training throughput of imported models, tmmu's cpu kernels beside
# PyTorch on the CPU, in one run (steps/s, the same threads):
#
#   bench/parity/throughput.sh
#
# resnet18 (torchvision, batch 8, 32×32 images) and bench/parity/gpt2.py's
# GPT-2 (2 layers, hidden 64, batch 4×32, vocabulary 512), both imported
# with tmmu import torch and trained from the weights the importer wrote,
# on the same data, by tmmu train --executor cpu and by train.py (eager
# fp32, AdamW). THREADS (default: the cores) sets PyTorch's threads and
# tmmu's GOMAXPROCS; STEPS (default 10) the steps. Each side's first
# step is timed too (tmmu train times every step; train.py is given no
# warm-up). PyTorch's BLAS is whatever libblas.so.3 is (Debian:
# libopenblas0-pthread makes it OpenBLAS).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
THREADS=${THREADS:-$(nproc)}
STEPS=${STEPS:-10}
PY=${PYTHON:-/usr/bin/python3}
"$PY" -c 'import torch, torchvision, numpy' || { echo "throughput: $PY lacks torch, torchvision or numpy" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/throughput.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/tmmu" ./cmd/tmmu
export TMMU_PYTHON=$PY GOMAXPROCS=$THREADS
"$PY" - "$tmp" <<'PYEOF'
import sys, numpy as np
d = sys.argv[1]
rng = np.random.default_rng(0)
y = rng.integers(0, 10, size=64)
x = rng.standard_normal((64, 3, 32, 32)).astype(np.float32)
np.save(d + "/images.npy", x); np.save(d + "/labels.npy", y)
x, out = 0, []
for i in range(40000):
    r = int(rng.integers(0, 1 << 30))
    x = r % 512 if r % 8 == 0 else (x * 7 + 1 + r % 4) % 512
    out.append(x)
np.array(out, dtype="<u2").tofile(d + "/tokens.bin")
PYEOF
"$tmp/tmmu" import torch resnet18 --train --batch 8 --image-size 32 --no-peak --out "$tmp/r18.json" 2>/dev/null
"$tmp/tmmu" import torch bench/parity/gpt2.py:build --train --no-peak --out "$tmp/gpt2.json" 2>/dev/null
sps() { "$PY" -c 'import json, sys; print("%.3g" % json.load(open(sys.argv[1]))["steps_per_second"])' "$1"; }
"$tmp/tmmu" train "$tmp/r18.json" --executor cpu --steps "$STEPS" --lr 1e-5 --weights "$tmp/r18.safetensors" --data "$tmp/images.npy" --labels "$tmp/labels.npy" -o json >"$tmp/r18.tmmu" 2>/dev/null
"$PY" bench/parity/train.py --model resnet18 --batch 8 --lr 1e-5 --threads "$THREADS" --weights "$tmp/r18.safetensors" --images "$tmp/images.npy" --labels "$tmp/labels.npy" --steps "$STEPS" >"$tmp/r18.torch"
"$tmp/tmmu" train "$tmp/gpt2.json" --executor cpu --steps "$STEPS" --weights "$tmp/gpt2.safetensors" --data "$tmp/tokens.bin" --order sequential -o json >"$tmp/gpt2.tmmu" 2>/dev/null
"$PY" bench/parity/train.py --batch 4 --threads "$THREADS" --weights "$tmp/gpt2.safetensors" --data "$tmp/tokens.bin" --steps "$STEPS" >"$tmp/gpt2.torch"
printf '%-34s %14s %14s %10s\n' model "tmmu cpu st/s" "PyTorch st/s" "ratio"
for m in r18:"resnet18 (batch 8, 32x32)" gpt2:"gpt2.py (2x64, batch 4x32)"; do
  k=${m%%:*} name=${m#*:}
  a=$(sps "$tmp/$k.tmmu") b=$(sps "$tmp/$k.torch")
  printf '%-34s %14s %14s %9sx\n' "$name" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2g", b / a }')"
done
echo "threads $THREADS; PyTorch $("$PY" -c 'import torch; print(torch.__version__)'), BLAS $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || echo unknown)"
