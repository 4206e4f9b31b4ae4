"""A GPT-2 in plain PyTorch, with Hugging Face's parameter names.

This is the model of tmmu's GPT-2 generator written as a user would write
it, not generated from it: the same arithmetic (pre-norm blocks, fused
qkv projection, causal attention with scale 1/sqrt(D), tanh-approximated
GELU, layer norms with eps 1e-5, an lm_head tied to the token embedding,
mean cross-entropy over every token) and Hugging Face's GPT2LMHeadModel
names (transformer.h.0.attn.c_attn.weight, ...), whose Conv1D weights are
stored [in, out]. Its state_dict is what `tmmu train --export` writes for
a generator GPT-2, and it loads with load_state_dict(strict=True)."""

import math

import torch
from torch import nn
from torch.nn import functional as F


class Conv1D(nn.Module):
    """y = x·w + b with w [in, out] (Hugging Face's GPT-2 layout)."""

    def __init__(self, nin, nout):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(nin, nout).normal_(0, 0.02))
        self.bias = nn.Parameter(torch.zeros(nout))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(*x.shape[:-1], -1)


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = Conv1D(d, 3 * d)
        self.c_proj = Conv1D(d, d)

    def forward(self, x):
        b, s, d = x.shape
        h = self.heads
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (t.view(b, s, h, d // h).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h))
        mask = torch.ones(s, s, dtype=torch.bool).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        return self.c_proj((att @ v).transpose(1, 2).reshape(b, s, d))


class MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_fc = Conv1D(d, 4 * d)
        self.c_proj = Conv1D(4 * d, d)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d, eps=1e-5)
        self.attn = Attention(d, heads)
        self.ln_2 = nn.LayerNorm(d, eps=1e-5)
        self.mlp = MLP(d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    def __init__(self, layers, d, heads, vocab, context):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(context, d)
        nn.init.normal_(self.wte.weight, 0, 0.02)
        nn.init.normal_(self.wpe.weight, 0, 0.01)
        self.h = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d, eps=1e-5)


class GPT2(nn.Module):
    """GPT2LMHeadModel's shape: forward(tokens) gives the logits,
    forward(tokens, labels) the mean loss."""

    def __init__(self, layers=2, d=64, heads=4, vocab=512, context=32):
        super().__init__()
        self.transformer = Transformer(layers, d, heads, vocab, context)

    def logits(self, idx):
        t = self.transformer
        pos = torch.arange(idx.shape[1])
        x = t.wte(idx) + t.wpe(pos)
        for blk in t.h:
            x = blk(x)
        return t.ln_f(x) @ t.wte.weight.t()

    def forward(self, idx, labels=None):
        logits = self.logits(idx)
        if labels is None:
            return logits
        return loss(logits, labels)


def loss(logits, labels):
    """Mean cross-entropy over every token."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def build(layers=2, d=64, heads=4, vocab=512, context=32, batch=4, seq=32):
    """For tmmu import torch gpt2.py:build --train: the module, example
    inputs (token ids), the loss of (logits, labels) and labels."""
    torch.manual_seed(0)
    m = GPT2(layers, d, heads, vocab, context)
    idx = torch.randint(0, vocab, (batch, seq))
    labels = torch.randint(0, vocab, (batch, seq))
    return m, (idx,), loss, labels
