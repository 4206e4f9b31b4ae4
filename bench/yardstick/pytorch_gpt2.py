#!/usr/bin/env python3
"""Train tmmu's GPT-2 training graph in PyTorch on the CPU, as a yardstick.

The model is the one `tmmu gen gpt2 --train` generates (models/gpt2.go),
tensor for tensor, with the same names and shapes:

  wte [V,H], wpe [C,H]                     token and position embeddings
  h<i>.ln_1.{w,b} [H]                      layernorm, eps 1e-5
  h<i>.attn.c_attn.{w [H,3H], b [3H]}      fused qkv, y = x·w + b, rows [q|k|v]
  causal attention, heads of D = H/heads, scale 1/sqrt(D)
  h<i>.attn.c_proj.{w [H,H], b [H]}
  h<i>.ln_2.{w,b} [H]
  h<i>.mlp.c_fc.{w [H,4H], b [4H]}, gelu (tanh approximation)
  h<i>.mlp.c_proj.{w [4H,H], b [H]}
  ln_f.{w,b} [H]
  lm head tied to wte: logits = ln_f(x)·wteᵀ
  loss: cross entropy, mean over the B·S tokens

AdamW as engine.DefaultAdamW: lr 1e-3, betas (0.9, 0.999), eps 1e-8,
weight decay 0.01 on every parameter (decoupled, bias-corrected; tmmu's
p -= lr·(m̂/(√v̂+eps) + wd·p) is torch.optim.AdamW's update).

The data is engine.Batch (engine/train.go) reproduced bit for bit: row r
of step s counts up modulo V from a start drawn by splitmix64 from
(seed, s, r); labels are the next tokens; steps are numbered from 1, as
`tmmu train` numbers them. The initialisation is engine.DefaultInit
reproduced too: vectors whose name ends in ".w" are ones, other vectors
zeros, matrices N(0, 0.02) by Box-Muller from splitmix64 of
(fnv64(name), flat index). Go and numpy may round log/cos differently in
the last bit, so a rare weight can differ by one float32 ulp; the loss of
step 1 agrees with tmmu's to about 1e-6 (float32 summation order differs).

Timing: --warmup steps run first and are not timed (they are still
training steps, 1…W); --steps N more are timed (W+1…W+N). tmmu train's
steps_per_second, by contrast, times every step including the first;
each of its steps feeds the batch and reads the loss back, and it seals
the state hash (SHA-256 over parameters, Adam m and v) once, untimed,
after the last step (every step with --state-every 1). --seal adds that
hashing to each PyTorch step, to compare with tmmu train --state-every 1.

Prints one JSON object. Needs PyTorch (Debian: apt-get install
python3-torch) and numpy; run it with /usr/bin/python3 on Debian.
"""

import argparse
import hashlib
import json
import math
import sys
import time

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover - environment dependent
    sys.stderr.write(
        "pytorch_gpt2.py: %s\n"
        "install PyTorch and numpy, e.g. on Debian: "
        "apt-get install -y python3-torch (and run /usr/bin/python3)\n" % e
    )
    sys.exit(3)

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
C1 = 0xBF58476D1CE4E5B9
C2 = 0x94D049BB133111EB


def splitmix_int(x):
    """engine.splitmix on a Python int: returns (new state, output)."""
    x = (x + GOLDEN) & M64
    z = x
    z = ((z ^ (z >> 30)) * C1) & M64
    z = ((z ^ (z >> 27)) * C2) & M64
    return x, z ^ (z >> 31)


def splitmix_np(x):
    """engine.splitmix on a uint64 array (wrapping arithmetic)."""
    x = x + np.uint64(GOLDEN)
    z = x
    z = (z ^ (z >> np.uint64(30))) * np.uint64(C1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(C2)
    return x, z ^ (z >> np.uint64(31))


def fnv64(s):
    h = 14695981039346656037
    for b in s.encode():
        h ^= b
        h = (h * 1099511628211) & M64
    return h


def default_init(name, shape):
    """engine.DefaultInit for a whole parameter, as a float32 array."""
    if len(shape) == 1:
        return np.full(shape, 1.0 if name.endswith(".w") else 0.0, dtype=np.float32)
    n = int(np.prod(shape))
    with np.errstate(over="ignore"):
        i = np.arange(1, n + 1, dtype=np.uint64)
        h = np.uint64(fnv64(name)) ^ (i * np.uint64(GOLDEN))
        h, a = splitmix_np(h)
        h, b = splitmix_np(h)
    u1 = ((a >> np.uint64(11)) + np.uint64(1)).astype(np.float64) / float(1 << 53)
    u2 = (b >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    v = 0.02 * np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)
    return v.astype(np.float32).reshape(shape)


def batch(seed, step, rows, seq, vocab):
    """engine.Batch: tokens and labels [rows, seq] as int64 tensors."""
    starts = []
    for r in range(rows):
        h = ((step * GOLDEN) & M64) ^ (((r + 1) * C1) & M64) ^ ((seed * C2) & M64)
        _, z = splitmix_int(h)
        starts.append(z % vocab)
    base = torch.tensor(starts, dtype=torch.int64).unsqueeze(1)
    i = torch.arange(seq, dtype=torch.int64).unsqueeze(0)
    return (base + i) % vocab, (base + i + 1) % vocab


def param_shapes(layers, hidden, context, vocab):
    """The parameters of models.GPT2, in the generator's creation order."""
    H = hidden
    shapes = [("wte", (vocab, H)), ("wpe", (context, H))]
    for i in range(layers):
        p = "h%d." % i
        shapes += [
            (p + "ln_1.w", (H,)), (p + "ln_1.b", (H,)),
            (p + "attn.c_attn.w", (H, 3 * H)), (p + "attn.c_attn.b", (3 * H,)),
            (p + "attn.c_proj.w", (H, H)), (p + "attn.c_proj.b", (H,)),
            (p + "ln_2.w", (H,)), (p + "ln_2.b", (H,)),
            (p + "mlp.c_fc.w", (H, 4 * H)), (p + "mlp.c_fc.b", (4 * H,)),
            (p + "mlp.c_proj.w", (4 * H, H)), (p + "mlp.c_proj.b", (H,)),
        ]
    shapes += [("ln_f.w", (H,)), ("ln_f.b", (H,))]
    return shapes


class GPT2(torch.nn.Module):
    def __init__(self, layers, hidden, heads, context, vocab):
        super().__init__()
        self.layers, self.hidden, self.heads = layers, hidden, heads
        self.names = []
        self.p = torch.nn.ParameterDict()
        for name, shape in param_shapes(layers, hidden, context, vocab):
            # ParameterDict keys may not contain "."
            self.p[name.replace(".", "_")] = torch.nn.Parameter(torch.from_numpy(default_init(name, shape)))
            self.names.append(name)

    def w(self, name):
        return self.p[name.replace(".", "_")]

    def ln(self, name, x):
        return F.layer_norm(x, (self.hidden,), self.w(name + ".w"), self.w(name + ".b"), eps=1e-5)

    def linear(self, name, x):
        return torch.addmm(self.w(name + ".b"), x.reshape(-1, x.shape[-1]), self.w(name + ".w")).view(*x.shape[:-1], -1)

    def forward(self, tokens, labels):
        B, S = tokens.shape
        H, nh = self.hidden, self.heads
        D = H // nh
        x = F.embedding(tokens, self.w("wte")) + self.w("wpe")[:S]
        mask = torch.ones(S, S, dtype=torch.bool).triu(1)
        for i in range(self.layers):
            p = "h%d." % i
            qkv = self.linear(p + "attn.c_attn", self.ln(p + "ln_1", x))
            q, k, v = (t.view(B, S, nh, D).transpose(1, 2) for t in qkv.split(H, dim=2))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
            att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(B, S, H)
            x = x + self.linear(p + "attn.c_proj", y)
            h = F.gelu(self.linear(p + "mlp.c_fc", self.ln(p + "ln_2", x)), approximate="tanh")
            x = x + self.linear(p + "mlp.c_proj", h)
        logits = self.ln("ln_f", x) @ self.w("wte").t()
        return F.cross_entropy(logits.view(B * S, -1), labels.reshape(-1))


def seal(model, opt):
    """SHA-256 over every parameter and its Adam m and v (tmmu's state seal)."""
    h = hashlib.sha256()
    for name in model.names:
        p = model.w(name)
        st = opt.state.get(p, {})
        for t in (p, st.get("exp_avg"), st.get("exp_avg_sq")):
            if t is not None:
                h.update(t.detach().numpy().tobytes())
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--context", type=int, default=0, help="rows of wpe (default: --seq)")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=64)
    ap.add_argument("--steps", type=int, default=20, help="timed steps, after the warm-up")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps run first")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (run.sh passes the number of cores, as tmmu's cpu executor uses every core)")
    ap.add_argument("--seed", type=int, default=0, help="the batch seed (tmmu train --seed)")
    ap.add_argument("--seal", action="store_true", help="SHA-256 the parameters and Adam state after each step, as tmmu train --state-every 1 does")
    a = ap.parse_args()
    context = a.context or a.seq
    if a.hidden % a.heads or a.seq > context or a.steps < 1 or a.warmup < 0 or a.threads < 1:
        ap.error("need hidden divisible by heads, seq ≤ context, steps ≥ 1, warmup ≥ 0, threads ≥ 1")

    torch.set_num_threads(a.threads)
    model = GPT2(a.layers, a.hidden, a.heads, context, a.vocab)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    nparams = sum(p.numel() for p in model.parameters())

    losses = []

    def step(s):
        tokens, labels = batch(a.seed, s, a.batch, a.seq, a.vocab)
        opt.zero_grad(set_to_none=True)
        loss = model(tokens, labels)
        loss.backward()
        opt.step()
        if a.seal:
            seal(model, opt)
        losses.append(loss.item())

    total = a.warmup + a.steps
    for s in range(1, a.warmup + 1):
        step(s)
    t0 = time.perf_counter()
    for s in range(a.warmup + 1, total + 1):
        step(s)
    dt = time.perf_counter() - t0

    print(json.dumps({
        "framework": "pytorch %s" % torch.__version__,
        "threads": torch.get_num_threads(),
        "config": {"layers": a.layers, "hidden": a.hidden, "heads": a.heads, "seq": a.seq,
                   "context": context, "batch": a.batch, "vocab": a.vocab},
        "parameters": nparams,
        "warmup_steps": a.warmup,
        "timed_steps": a.steps,
        "seal": a.seal,
        "seconds": dt,
        "steps_per_second": a.steps / dt,
        "first_step": 1,
        "first_loss": losses[0],
        "last_step": total,
        "last_loss": losses[-1],
    }))


if __name__ == "__main__":
    main()
