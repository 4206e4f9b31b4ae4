#!/usr/bin/env python3
"""tmmu_export: a PyTorch module as a UML_Model_IR graph, for tmmu.

Traces one step of the module with make_fx (aten ops, real tensors on the
CPU): the forward pass for inference, or with --train the forward pass, the
backward pass (torch.autograd.grad) and the optimizer update (AdamW or SGD:
torch.optim's single-tensor update, one node per parameter), and writes the
graph with every tensor's shape, dtype and role. It also runs the same step eagerly and
records the peak of live tensor bytes PyTorch itself holds (its CPU
allocator, read through the profiler), so that tmmu's plan can be compared
with what PyTorch uses.

    tmmu_export.py MODEL [--train] [--batch N] [--seq N] [--optimizer adamw|sgd]
                   [--out IR.json] [--report REPORT.json]

MODEL is a torchvision model name (resnet50, mobilenet_v3_large,
efficientnet_b0, vit_b_16, convnext_tiny, resnet18, ...), gpt2-small (a
GPT-2-small-shaped module defined here), or FILE.py:NAME where NAME is a
class or a function returning a module, (module, example_inputs, loss_fn)
or (module, example_inputs, loss_fn, target).

How the aten graph maps to the IR:
  - parameters and buffers are parameters, optimizer state (exp_avg,
    exp_avg_sq, momentum) is optimizer_state, the example inputs are inputs;
    the loss (training) or the outputs (inference) are outputs;
  - results of forward nodes are activations (saved_for_backward when a
    backward node reads them), of backward and optimizer nodes gradients;
  - views (results that share a storage with an existing tensor: view,
    t, transpose, expand, slice, split, ...) own no memory: their readers
    read the tensor they view, and the view-only nodes are left out;
  - an in-place write (add_, relu_, a batch norm updating its running
    statistics, found by PyTorch's version counters) to a parameter,
    buffer or optimizer state makes it in_place_write, listed as both input
    and output; to an activation it makes a new tensor in the activation's
    alias group (one storage), so that saved values stay distinct versions;
  - tuple results keep every tensor element, used or not (PyTorch allocates
    them); zero-size tensors are left out.
Needs only torch (and torchvision for its models). Writes nothing on error.
"""

import argparse
import importlib.util
import json
import math
import operator
import os
import sys
import tempfile

import torch
import torch.fx
from torch import nn

try:
    from functorch import make_fx
except ImportError:  # newer torch
    from torch.fx.experimental.proxy_tensor import make_fx

try:
    from torch.func import functional_call
except ImportError:  # torch 1.13
    from torch.nn.utils.stateless import functional_call

DTYPES = {
    torch.float32: "fp32", torch.float64: "fp64", torch.float16: "fp16", torch.bfloat16: "bf16",
    torch.int64: "int64", torch.int32: "int32", torch.int16: "int16", torch.int8: "int8",
    torch.uint8: "uint8", torch.bool: "bool",
}


class ExportError(Exception):
    pass


# ---------------------------------------------------------------- models

class GPT2Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):
        b, s, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q = q.view(b, s, h, d // h).transpose(1, 2)
        k = k.view(b, s, h, d // h).transpose(1, 2)
        v = v.view(b, s, h, d // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h))
        mask = torch.ones(s, s, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, s, d)
        x = x + self.proj(y)
        return x + self.out(nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2(nn.Module):
    """GPT-2 small's shape: 12 blocks, width 768, 12 heads, vocabulary
    50257, context 1024, the lm_head tied to the token embedding."""

    def __init__(self, layers=12, d=768, heads=12, vocab=50257, context=1024):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(context, d)
        self.blocks = nn.ModuleList([GPT2Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1])
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.ln(x) @ self.wte.weight.t()


def token_loss(logits, target):
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def load_model(name, batch, seq, image_size=224):
    """Returns (module, example inputs, loss_fn(output, target), target).
    batch and seq are None when not given."""
    torch.manual_seed(0)
    given = batch
    batch = batch or 1
    if name == "gpt2-small":
        seq = seq or 128
        m = GPT2()
        x = torch.randint(0, 50257, (batch, seq))
        return m, (x,), token_loss, torch.randint(0, 50257, (batch, seq))
    if ":" in name and name.split(":")[0].endswith(".py"):
        path, attr = name.rsplit(":", 1)
        spec = importlib.util.spec_from_file_location("tmmu_user_model", path)
        if spec is None:
            raise ExportError(f"{path}: not a Python file")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        if not hasattr(mod, attr):
            raise ExportError(f"{path} defines no {attr!r}")
        obj = getattr(mod, attr)
        if callable(obj) and not isinstance(obj, type):
            # A builder may take the batch and sequence length tmmu import
            # torch was given.
            import inspect
            params = inspect.signature(obj).parameters
            got = obj(**{k: v for k, v in (("batch", given), ("seq", seq)) if k in params and v is not None})
        else:
            got = obj() if callable(obj) else obj
        if isinstance(got, nn.Module):
            x = torch.randn(batch, *getattr(mod, "INPUT_SHAPE", (3, 224, 224)))
            return got, (x,), nn.functional.cross_entropy, None
        if len(got) == 4:  # (module, inputs, loss_fn, target)
            m, inputs, loss_fn, target = got
            return m, tuple(inputs), loss_fn, target
        m, inputs, loss_fn = got
        return m, tuple(inputs), loss_fn, None
    try:
        import torchvision
    except ImportError:
        raise ExportError("torchvision is not installed (Debian: apt-get install python3-torchvision)")
    if not hasattr(torchvision.models, name):
        raise ExportError(f"unknown model {name!r}: a torchvision model name, gpt2-small, or FILE.py:NAME")
    m = getattr(torchvision.models, name)()
    return m, (torch.randn(batch, 3, image_size, image_size),), nn.functional.cross_entropy, None


def default_target(out, loss_fn):
    if out.dim() == 2 and out.dtype.is_floating_point:
        return torch.randint(0, out.shape[1], (out.shape[0],))
    return torch.randn_like(out)


# ------------------------------------------------------------- optimizer

# The updates are ops of their own (library "tmmu"), so that each
# parameter's update is one node reading the parameter, its gradient and
# its state and writing the parameter and the state in place, as a fused
# optimizer runs it and as tmmu's ZeRO pass partitions it. Their bodies are
# torch.optim's single-tensor updates; their temporaries (one
# parameter-sized denominator for AdamW) are not planned.
_lib = torch.library.Library("tmmu", "DEF")
_lib.define("adamw_(Tensor(a!) p, Tensor g, Tensor(b!) m, Tensor(c!) v, float lr, float beta1, float beta2, "
            "float eps, float wd, int step) -> ()")
_lib.define("sgd_(Tensor(a!) p, Tensor g, Tensor(b!) buf, float lr, float momentum, int step) -> ()")


def _adamw(p, g, m, v, lr, b1, b2, eps, wd, step):
    p.mul_(1 - lr * wd)
    m.lerp_(g, 1 - b1)
    v.mul_(b2).addcmul_(g, g.conj(), value=1 - b2)
    bc1, bc2 = 1 - b1 ** step, 1 - b2 ** step
    denom = (v.sqrt() / math.sqrt(bc2)).add_(eps)
    p.addcdiv_(m, denom, value=-lr / bc1)


def _sgd(p, g, buf, lr, momentum, step):
    if step == 1:
        buf.copy_(g)
    else:
        buf.mul_(momentum).add_(g)
    p.add_(buf, alpha=-lr)


_lib.impl("adamw_", _adamw, "CPU")
_lib.impl("sgd_", _sgd, "CPU")
OPS = {"tmmu::adamw_": "adamw", "tmmu::sgd_": "sgd"}


class AdamW:
    """torch.optim.AdamW, single-tensor update (foreach=False)."""

    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        self.lr, self.betas, self.eps, self.wd = lr, betas, eps, weight_decay

    def state(self, p):
        return {"exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}

    def update(self, p, g, st, step):
        torch.ops.tmmu.adamw_(p, g, st["exp_avg"], st["exp_avg_sq"], self.lr, self.betas[0], self.betas[1],
                              self.eps, self.wd, step)

    def torch(self, params):
        return torch.optim.AdamW(params, lr=self.lr, betas=self.betas, eps=self.eps, weight_decay=self.wd, foreach=False)


class SGD:
    """torch.optim.SGD with momentum, single-tensor update."""

    def __init__(self, lr=1e-2, momentum=0.9):
        self.lr, self.momentum = lr, momentum

    def state(self, p):
        return {"momentum_buffer": torch.zeros_like(p)}

    def update(self, p, g, st, step):
        torch.ops.tmmu.sgd_(p, g, st["momentum_buffer"], self.lr, self.momentum, step)

    def torch(self, params):
        return torch.optim.SGD(params, lr=self.lr, momentum=self.momentum, foreach=False)


# ----------------------------------------------------------------- trace

def trace(model, inputs, loss_fn, target, train, opt):
    """Returns (graph module, placeholder roles, the real arguments, the
    number of gradient outputs)."""
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    pnames, bnames = list(params), list(buffers)
    if train:
        model.train()
        states = [opt.state(p) for p in params.values()]
        snames = [f"{n}.{k}" for n, st in zip(pnames, states) for k in st]

        def step(pvals, bvals, svals, inputs, target):
            ps = dict(zip(pnames, pvals))
            out = functional_call(model, {**ps, **dict(zip(bnames, bvals))}, tuple(inputs))
            loss = loss_fn(out, target)
            grads = torch.autograd.grad(loss, pvals)
            it = iter(svals)
            for p, g, st in zip(pvals, grads, states):
                opt.update(p.detach(), g, {k: next(it) for k in st}, step=2)
            return [loss, *grads]

        pvals = [p.detach().clone().requires_grad_(True) for p in params.values()]
        bvals = [b.detach().clone() for b in buffers.values()]
        svals = [t for st in states for t in st.values()]
        if target is None:
            with torch.no_grad():
                target = default_target(model(*inputs), loss_fn)
        args = (pvals, bvals, svals, list(inputs), target)
        roles = (["parameter"] * len(pvals) + ["parameter"] * len(bvals) + ["optimizer_state"] * len(svals)
                 + ["input"] * (len(inputs) + 1))
        names = pnames + bnames + snames + [f"input{i}" for i in range(len(inputs))] + ["target"]
        gm = make_fx(step)(*args)
        flat = pvals + bvals + svals + list(inputs) + [target]
        return gm, roles, names, flat, len(pvals)
    model.eval()

    def forward(pvals, bvals, inputs):
        return functional_call(model, {**dict(zip(pnames, pvals)), **dict(zip(bnames, bvals))}, tuple(inputs))

    pvals = [p.detach() for p in params.values()]
    bvals = [b.detach() for b in buffers.values()]
    args = (pvals, bvals, list(inputs))
    with torch.no_grad():
        gm = make_fx(forward)(*args)
    roles = ["parameter"] * (len(pvals) + len(bvals)) + ["input"] * len(inputs)
    names = pnames + bnames + [f"input{i}" for i in range(len(inputs))]
    return gm, roles, names, pvals + bvals + list(inputs), 0


def storage_key(t):
    return t.storage().data_ptr()


class Recorder(torch.fx.Interpreter):
    """Runs the traced graph on real tensors, keeping every value alive (so
    that no storage is reused), and records per node its tensor results and
    which inputs it wrote in place."""

    def __init__(self, gm):
        super().__init__(gm, garbage_collect_values=False)
        self.results = {}  # node → list of tensors (tuple results flattened)
        self.written = {}  # node → indices of tensor inputs it mutated

    def run_node(self, n):
        ins = [a for a in n.all_input_nodes]
        before = [self.env[a]._version if isinstance(self.env.get(a), torch.Tensor) else None for a in ins]
        out = super().run_node(n)
        # Written in place: the version counter moved, or the op's schema
        # says so.
        mutated = set()
        schema = getattr(n.target, "_schema", None)
        for i, arg in enumerate(schema.arguments if schema is not None else []):
            if arg.alias_info is not None and arg.alias_info.is_write:
                v = n.args[i] if i < len(n.args) else n.kwargs.get(arg.name)
                if isinstance(v, torch.fx.Node):
                    mutated.add(v)
        if schema is not None and schema.name == "aten::native_batch_norm" and len(n.args) > 5 and n.args[5]:
            # torch 1.13's schema does not mark the running statistics a
            # training batch norm updates.
            mutated.update(a for a in n.args[3:5] if isinstance(a, torch.fx.Node))
        self.written[n] = [k for k, a in enumerate(ins)
                           if a in mutated or before[k] is not None and self.env[a]._version != before[k]]
        if isinstance(out, torch.Tensor):
            self.results[n] = [out]
        elif isinstance(out, (tuple, list)):
            self.results[n] = [x for x in out if isinstance(x, torch.Tensor)]
        else:
            self.results[n] = []
        return out


def phases(gm, ngrads, train):
    """forward: what the loss depends on; backward: what the gradients
    depend on besides; optimizer: the rest."""
    nodes = list(gm.graph.nodes)
    if not train:
        return {n: "forward" for n in nodes}
    out = nodes[-1]
    results = out.args[0]
    loss, grads = results[0], results[1:1 + ngrads]

    def ancestors(roots):
        seen, stack = set(), [r for r in roots if isinstance(r, torch.fx.Node)]
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            stack.extend(n.all_input_nodes)
        return seen

    fwd = ancestors([loss])
    bwd = ancestors(grads) - fwd
    return {n: "forward" if n in fwd else "backward" if n in bwd else "optimizer" for n in nodes}


def op_name(n):
    t = n.target
    if isinstance(t, torch._ops.OpOverload) and f"{t.namespace}::{t.overloadpacket.__name__}" in OPS:
        return OPS[f"{t.namespace}::{t.overloadpacket.__name__}"]
    if isinstance(t, torch._ops.OpOverload):
        return "aten::" + t.overloadpacket.__name__ if t.namespace == "aten" else f"{t.namespace}::{t.overloadpacket.__name__}"
    if isinstance(t, torch._ops.OpOverloadPacket):
        return f"aten::{t.__name__}"
    return getattr(t, "__name__", str(t))


def build_ir(name, gm, roles, names, flat, ngrads, train):
    rec = Recorder(gm)
    with torch.no_grad():
        rec.run(*flat)
    phase = phases(gm, ngrads, train)

    tensors = {}     # IR id → dict
    value = {}       # (node, k) → IR id currently holding that value's bytes
    root_of = {}     # storage key → IR id of the tensor that owns it (the current version)
    group_of = {}    # IR id → alias group
    persistent = {"parameter", "optimizer_state", "constant", "input"}
    nodes_out = []
    order = []
    saved = set()
    consumers = {}
    dropped_views = 0

    base_of = {}     # IR id → the storage offset of its first element

    def new_tensor(tid, t, role):
        if t.numel() == 0:
            return None
        if t.dtype not in DTYPES:
            raise ExportError(f"tensor {tid}: dtype {t.dtype} is not supported")
        tensors[tid] = {"id": tid, "shape": list(t.shape), "dtype": DTYPES[t.dtype], "role": role}
        base_of[tid] = t.storage_offset()
        return tid

    def ref(tid, t):
        """A tensor argument or result: the IR tensor whose storage holds
        it and the view of that storage (elements from the IR tensor's
        first) the op reads or writes."""
        return {"id": tid, "shape": list(t.shape), "strides": list(t.stride()),
                "offset": t.storage_offset() - base_of.get(tid, 0)}

    def arg_ref(a):
        t = rec.env.get(a)
        if not isinstance(t, torch.Tensor) or t.numel() == 0:
            return None
        tid = value.get((a, 0))
        return ref(tid, t) if tid is not None else None

    def encode(v):
        """One argument of a call, typed (floats as their exact repr)."""
        if isinstance(v, torch.fx.Node):
            r = arg_ref(v)
            return {"k": "t", "t": r} if r else {"k": "n"}
        if isinstance(v, (list, tuple)):
            if any(isinstance(x, torch.fx.Node) for x in v):
                return {"k": "tl", "tl": [arg_ref(x) if isinstance(x, torch.fx.Node) else None for x in v]}
            if all(isinstance(x, bool) for x in v):
                return {"k": "il", "il": [int(x) for x in v]}
            if all(isinstance(x, int) for x in v):
                return {"k": "il", "il": [int(x) for x in v]}
            if all(isinstance(x, (int, float)) for x in v):
                return {"k": "fl", "fl": [repr(float(x)) for x in v]}
            raise ExportError(f"an argument list {v!r} of unsupported values")
        if isinstance(v, bool):
            return {"k": "b", "b": v}
        if isinstance(v, int):
            return {"k": "i", "i": v}
        if isinstance(v, float):
            return {"k": "f", "f": repr(v)}
        if isinstance(v, str):
            return {"k": "s", "s": v}
        if v is None:
            return {"k": "n"}
        if isinstance(v, torch.dtype):
            return {"k": "s", "s": DTYPES.get(v, str(v))}
        if isinstance(v, (torch.device, torch.layout, torch.memory_format)):
            return {"k": "s", "s": str(v)}
        raise ExportError(f"an argument {v!r} of type {type(v).__name__}")

    def call_args(n):
        """The node's arguments in its schema's order, defaults filled in."""
        schema = getattr(n.target, "_schema", None)
        if schema is None:
            return [encode(a) for a in n.args]
        out = []
        for i, arg in enumerate(schema.arguments):
            if i < len(n.args):
                v = n.args[i]
            elif arg.name in n.kwargs:
                v = n.kwargs[arg.name]
            elif arg.has_default_value():
                v = arg.default_value
            else:
                v = None
            out.append(encode(v))
        return out

    def result_ref(t):
        if not isinstance(t, torch.Tensor) or t.numel() == 0:
            return None
        tid = root_of.get(storage_key(t))
        return ref(tid, t) if tid is not None else None

    def target_name(n):
        t = n.target
        if isinstance(t, torch._ops.OpOverload):
            return f"{t.namespace}::{t.overloadpacket.__name__}.{t._overloadname}"
        return op_name(n)

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for n, role, pname in zip(placeholders, roles, names):
        t = rec.env[n]
        tid = pname
        if new_tensor(tid, t, role):
            value[(n, 0)] = tid
            root_of[storage_key(t)] = tid

    def resolve(a):
        """The IR ids an fx argument node reads."""
        out = []
        for k, t in enumerate(rec.results.get(a, [rec.env[a]] if isinstance(rec.env.get(a), torch.Tensor) else [])):
            tid = value.get((a, k))
            if tid is not None:
                out.append(tid)
        return out

    for n in gm.graph.nodes:
        if n.op in ("placeholder", "output"):
            continue
        if n.op == "get_attr":
            t = rec.env[n]
            tid = n.name
            if isinstance(t, torch.Tensor) and new_tensor(tid, t, "constant"):
                value[(n, 0)] = tid
                root_of.setdefault(storage_key(t), tid)
            continue
        if n.target is operator.getitem:
            src, k = n.args
            tup = rec.results[src]
            t = rec.env[n]
            if isinstance(t, torch.Tensor):
                for j, x in enumerate(tup):
                    if x is t and (src, j) in value:
                        value[(n, 0)] = value[(src, j)]
            continue
        ph = phase[n]
        call = {"target": target_name(n), "args": call_args(n)}
        ins = []
        for a in n.all_input_nodes:
            for tid in resolve(a):
                if tid not in ins:
                    ins.append(tid)
        outs = []
        wrote = [a for k, a in enumerate(n.all_input_nodes) if k in rec.written[n]]
        for a in wrote:
            for tid in resolve(a):
                base = tensors[tid]
                if base["role"] in persistent:
                    base["in_place_write"] = True
                    if tid not in outs:
                        outs.append(tid)
                    continue
                # A new version of an activation: same storage, a new id in its alias group.
                grp = group_of.setdefault(tid, f"storage:{tid}")
                tensors[tid]["alias_group_id"] = grp
                nid = f"{n.name}.{tid}"
                tensors[nid] = dict(base, id=nid, role="activation" if ph == "forward" else "gradient", alias_group_id=grp)
                tensors[nid].pop("saved_for_backward", None)
                tensors[nid].pop("in_place_write", None)
                group_of[nid] = grp
                for key, v in list(value.items()):
                    if v == tid:
                        value[key] = nid
                for sk, v in list(root_of.items()):
                    if v == tid:
                        root_of[sk] = nid
                base_of[nid] = base_of.get(tid, 0)
                outs.append(nid)
        for k, t in enumerate(rec.results[n]):
            if t.numel() == 0:
                continue
            key = storage_key(t)
            if key in root_of:
                # A view (or the written tensor itself): no memory of its own.
                value[(n, k)] = root_of[key]
                if not wrote:
                    dropped_views += 1
                continue
            role = "activation" if ph == "forward" else "gradient"
            tid = n.name if k == 0 else f"{n.name}.{k}"
            new_tensor(tid, t, role)
            value[(n, k)] = tid
            root_of[key] = tid
            outs.append(tid)
        if not outs:
            continue  # a view-only node: nothing is computed
        for tid in ins:
            consumers.setdefault(tid, set()).add(ph)
        nd = {"id": n.name, "op": op_name(n), "inputs": ins, "outputs": outs, "phase": ph}
        if nd["op"] not in OPS.values():
            # tmmu's own update ops (adamw, sgd) are executed as such,
            # with the job's hyper-parameters; aten calls are recorded.
            res = rec.env[n]
            call["results"] = [result_ref(x) for x in (res if isinstance(res, (tuple, list)) else [res])]
            nd["call"] = call
        nodes_out.append(nd)
        order.append(n.name)

    # Outputs: the loss (training) or the results (inference).
    out_node = [n for n in gm.graph.nodes if n.op == "output"][0]
    results = out_node.args[0]
    results = results if isinstance(results, (list, tuple)) else [results]
    finals = results[:1] if train else results
    for r in finals:
        if isinstance(r, torch.fx.Node):
            for tid in resolve(r):
                if tensors[tid]["role"] in ("activation", "gradient"):
                    tensors[tid]["role"] = "output"
    if train:
        # Forward activations read by backward nodes are saved for backward.
        for tid, ph in consumers.items():
            t = tensors[tid]
            if t["role"] == "activation" and "backward" in ph and not t.get("in_place_write"):
                t["saved_for_backward"] = True
                saved.add(tid)
    used = set()
    for nd in nodes_out:
        used.update(nd["inputs"])
        used.update(nd["outputs"])
    if train:
        rename(tensors, nodes_out, used)
    ir = {
        "name": name,
        "tensors": [tensors[k] for k in sorted(used)],
        "nodes": nodes_out,
        "execution_order": order,
    }
    stats = {"aten_nodes": sum(1 for n in gm.graph.nodes if n.op == "call_function"), "ir_nodes": len(nodes_out),
             "views_elided": dropped_views, "saved_for_backward": len(saved)}
    return ir, stats


def rename(tensors, nodes, used):
    """Names a training graph's data inputs and loss as tmmu's executors
    bind them: the model's one input "tokens" (integer, [batch, seq]) or
    "images" (floating, [batch, C, H, W]), the loss's target "labels",
    the loss "loss"."""
    names = {}
    x, y = tensors.get("input0"), tensors.get("target")
    if x is not None and "input1" not in tensors:
        if x["dtype"] in ("int64", "int32") and len(x["shape"]) == 2:
            names["input0"] = "tokens"
        elif x["dtype"] == "fp32" and len(x["shape"]) == 4:
            names["input0"] = "images"
    if y is not None and y["dtype"] in ("int64", "int32"):
        names["target"] = "labels"
    outs = [tid for tid, t in tensors.items() if t["role"] == "output" and tid in used]
    if len(outs) == 1 and tuple(tensors[outs[0]]["shape"]) == ():
        names[outs[0]] = "loss"
    if any(new in tensors for new in names.values()):
        return  # the module already has a tensor of that name
    for old, new in names.items():
        t = tensors.pop(old)
        t["id"] = new
        tensors[new] = t
        if old in used:
            used.discard(old)
            used.add(new)
    for nd in nodes:
        nd["inputs"] = [names.get(i, i) for i in nd["inputs"]]
        nd["outputs"] = [names.get(i, i) for i in nd["outputs"]]
        call = nd.get("call", {})
        refs = [a.get("t") for a in call.get("args", [])] + [r for a in call.get("args", []) for r in a.get("tl", []) or []]
        for r in refs + call.get("results", []):
            if r is not None:
                r["id"] = names.get(r["id"], r["id"])


ST_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
             torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8", torch.bool: "BOOL"}


def write_weights(path, state, ir):
    """The module's parameters and buffers that are parameters of the IR,
    as safetensors (what tmmu train --weights reads): PyTorch's own
    initial values, so tmmu starts where PyTorch would."""
    keep = {t["id"] for t in ir["tensors"] if t["role"] == "parameter"}
    header, blobs, at = {}, [], 0
    for name, t in sorted(state.items()):
        if name not in keep or t.numel() == 0:
            continue
        if t.dtype not in ST_DTYPES:
            raise ExportError(f"{name}: dtype {t.dtype} has no safetensors type")
        b = t.detach().contiguous().cpu().numpy().tobytes()
        header[name] = {"dtype": ST_DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    write(path, len(h).to_bytes(8, "little") + h + b"".join(blobs))


# ------------------------------------------------------------------ peak

def live_bytes(ts):
    seen, total = set(), 0
    for t in ts:
        if isinstance(t, torch.Tensor) and t.numel() > 0:
            k = storage_key(t)
            if k not in seen:
                seen.add(k)
                total += t.storage().nbytes() if hasattr(t.storage(), "nbytes") else t.storage().size() * t.element_size()
    return total


def eager_peak(model, inputs, loss_fn, target, train, opt):
    """PyTorch's own peak of live tensor bytes for one step: what is live
    before it (parameters, buffers, optimizer state, inputs) plus the
    highest net allocation of the CPU allocator during it, read from the
    profiler's memory events."""
    params = [p for p in model.parameters()]
    if train:
        model.train()
        o = opt.torch(params)
        if target is None:
            with torch.no_grad():
                target = default_target(model(*inputs), loss_fn)
        # An update with zero gradients first, so that the optimizer holds
        # its state, as the traced step assumes, without a pass.
        for p in params:
            p.grad = torch.zeros_like(p)
        o.step()
        o.zero_grad(set_to_none=True)
        state = [t for s in o.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
        base = live_bytes(params + list(model.buffers()) + state + list(inputs) + [target])

        def step():
            loss_fn(model(*inputs), target).backward()
            o.step()
    else:
        model.eval()
        base = live_bytes(params + list(model.buffers()) + list(inputs))

        def step():
            with torch.no_grad():
                return model(*inputs)
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = step()
    # Allocations (positive) and frees (negative), in time order.
    events = sorted((e.start_us(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    cur = peak = 0
    for _, nbytes in events:
        cur += nbytes
        peak = max(peak, cur)
    del out
    return base + peak, base


def export_onnx(model, inputs, path):
    """torch.onnx.export with a dynamic leading dimension, then onnx's
    shape inference when onnx is installed; written whole or not at all."""
    model.eval()
    names = [f"input{i}" for i in range(len(inputs))]
    dynamic = {n: {0: "batch"} for n in names}
    dynamic["output"] = {0: "batch"}
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix="." + os.path.basename(path))
    os.close(fd)
    try:
        torch.onnx.export(model, tuple(inputs), tmp, input_names=names, output_names=["output"],
                          dynamic_axes=dynamic, opset_version=14)
        try:
            import onnx
            onnx.save(onnx.shape_inference.infer_shapes(onnx.load(tmp)), tmp)
        except ImportError:
            print("tmmu_export: the onnx package is missing: no value_info added (tmmu infers the shapes it can)",
                  file=sys.stderr)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv=None):
    ap = argparse.ArgumentParser(prog="tmmu_export.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--train", action="store_true", help="forward, backward and optimizer step (default: inference)")
    ap.add_argument("--batch", type=int, default=None, help="batch size (default 1; a FILE.py builder taking batch: its own default)")
    ap.add_argument("--seq", type=int, default=None, help="tokens per sequence (gpt2-small: default 128; a FILE.py builder taking seq: its own default)")
    ap.add_argument("--image-size", type=int, default=224, help="the side of a torchvision model's square input images")
    ap.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    ap.add_argument("--name", help="the graph's name (default: MODEL and mode)")
    ap.add_argument("--out", help="write the IR (JSON) to OUT; default standard output")
    ap.add_argument("--report", help="write the report (PyTorch's peak, counts) as JSON to REPORT")
    ap.add_argument("--weights", help="write the module's initial parameters and buffers (safetensors) to WEIGHTS")
    ap.add_argument("--no-peak", action="store_true", help="skip the eager run that measures PyTorch's peak")
    ap.add_argument("--onnx", metavar="FILE", help="instead: export the model to ONNX (opset 14, dynamic batch "
                    "\"batch\", shapes inferred when the onnx package is installed), for tmmu import onnx")
    a = ap.parse_args(argv)
    if (a.batch is not None and a.batch < 1) or (a.seq is not None and a.seq < 1) or a.image_size < 1:
        ap.error("--batch, --seq and --image-size must be positive")
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    try:
        model, inputs, loss_fn, target = load_model(a.model, a.batch, a.seq, a.image_size)
        initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if a.onnx:
            export_onnx(model, inputs, a.onnx)
            return 0
        opt = AdamW() if a.optimizer == "adamw" else SGD()
        if inputs and isinstance(inputs[0], torch.Tensor) and inputs[0].dim() > 0:
            a.batch = inputs[0].shape[0]  # a FILE.py:NAME may bring its own inputs
        name = a.name or f"{os.path.basename(a.model)}-{'train' if a.train else 'inference'}-b{a.batch}"
        gm, roles, names, flat, ngrads = trace(model, inputs, loss_fn, target, a.train, opt)
        ir, stats = build_ir(name, gm, roles, names, flat, ngrads, a.train)
        report = {"model": a.model, "mode": "train" if a.train else "inference", "batch": a.batch,
                  "torch_version": torch.__version__, **stats}
        if a.model == "gpt2-small":
            report["seq"] = a.seq or 128
        if not a.no_peak:
            model, inputs, loss_fn, target = load_model(a.model, a.batch, a.seq, a.image_size)
            peak, base = eager_peak(model, inputs, loss_fn, target, a.train, AdamW() if a.optimizer == "adamw" else SGD())
            report.update(pytorch_peak_bytes=peak, pytorch_persistent_bytes=base,
                          pytorch_peak_source="CPU allocator via torch.profiler (profile_memory=True)")
    except ExportError as e:
        print(f"tmmu_export: {e}", file=sys.stderr)
        return 1
    data = json.dumps(ir, separators=(",", ":")) + "\n"
    write(a.out, data)
    if a.weights:
        write_weights(a.weights, initial, ir)
    if a.report:
        write(a.report, json.dumps(report, indent=1) + "\n")
    return 0


def write(path, data):
    """Writes whole or not at all (text or bytes)."""
    if not path:
        sys.stdout.write(data)
        return
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix="." + os.path.basename(path))
    try:
        with os.fdopen(fd, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


if __name__ == "__main__":
    sys.exit(main())
