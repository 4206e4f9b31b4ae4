#!/usr/bin/env python3
"""The PyTorch side of tmmu's parity checks: trains gpt2.py's GPT-2 as a
user would, eager fp32 on the CPU, on the same weights and batches as
`tmmu train --weights W --data D --order sequential`.

    train.py --init W.safetensors [config]          write initial weights
    train.py --weights W --data D --steps N [config] [--export OUT]
             [--val-data V --val-batches K]
    train.py --weights W --val-data V --val-batches K --steps 0 [config]
                                                   the loss of W on V only
    train.py --model resnet18 --weights W --images X.npy --labels Y.npy
             --steps N --batch B [--export OUT]     a torchvision classifier

Image sets are read as tmmu reads them: row r of the k-th step is sample
(k·B + r) mod N of the .npy arrays (float32 as they are, uint8 / 255).

The batches follow tmmu's sequential order: with T tokens (little-endian
uint16 or uint32, --data-format), row r of the k-th step (k = 0 first) of
a global batch of B rows of S tokens starts at token ((k·B + r)·S) mod
(T − S − 1), its labels the next S tokens. AdamW is torch.optim.AdamW.
Prints one JSON object: the loss of every step (and the validation loss
after the last one), the seconds the timed steps took.

Needs torch and numpy. safetensors is read and written here (PyTorch 1.13
has no reader): 8-byte little-endian header length, a JSON header, the
raw bytes.
"""

import argparse
import json
import os
import struct
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2 import GPT2  # noqa: E402

DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32, "U8": np.uint8}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        arr = np.frombuffer(data[b:end], dtype=DTYPES[e["dtype"]]).reshape(e["shape"])
        out[name] = torch.from_numpy(arr.copy())
    return out


def write_safetensors(path, tensors):
    header, blobs, at = {}, [], 0
    for name in sorted(tensors):
        a = tensors[name].detach().contiguous().numpy()
        dtype = {np.dtype(np.int64): "I64"}.get(a.dtype, "F32")
        if dtype == "F32":
            a = a.astype(np.float32)
        b = a.tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def rows(tokens, k, B, S):
    T = len(tokens)
    starts = [((k * B + r) * S) % (T - S - 1) for r in range(B)]
    x = np.stack([tokens[s:s + S] for s in starts]).astype(np.int64)
    y = np.stack([tokens[s + 1:s + S + 1] for s in starts]).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--context", type=int, default=32)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--batch", type=int, default=2, help="the global batch")
    ap.add_argument("--seed", type=int, default=0, help="torch.manual_seed for --init")
    ap.add_argument("--init", metavar="OUT", help="write the module's initial weights to OUT and exit")
    ap.add_argument("--weights")
    ap.add_argument("--data")
    ap.add_argument("--data-format", default="uint16", choices=["uint16", "uint32"])
    ap.add_argument("--val-data")
    ap.add_argument("--val-batches", type=int, default=4)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.999)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--export", metavar="OUT", help="write the trained weights to OUT")
    ap.add_argument("--model", default="gpt2", help="gpt2 (gpt2.py), a torchvision classifier's name, or FILE.py:NAME (a builder)")
    ap.add_argument("--grads", metavar="OUT", help="instead of training: write the gradient of the first batch's loss, parameter by parameter")
    ap.add_argument("--images", help="a .npy of samples [N, C, H, W] (torchvision models)")
    ap.add_argument("--labels", help="a .npy of labels [N]")
    a = ap.parse_args()
    if a.model != "gpt2":
        return train_images(a)
    if a.threads:
        torch.set_num_threads(a.threads)

    torch.manual_seed(a.seed)
    model = GPT2(a.layers, a.hidden, a.heads, a.vocab, a.context)
    if a.init:
        write_safetensors(a.init, model.state_dict())
        return 0
    model.load_state_dict(read_safetensors(a.weights), strict=True)
    tokens = np.fromfile(a.data, dtype=np.dtype(a.data_format).newbyteorder("<")) if a.data else None
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps,
                            weight_decay=a.weight_decay)
    losses = []
    t0 = time.perf_counter()
    for k in range(a.steps):
        x, y = rows(tokens, k, a.batch, a.seq)
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    seconds = time.perf_counter() - t0
    out = {"framework": "pytorch " + torch.__version__, "threads": torch.get_num_threads(),
           "losses": losses, "seconds": seconds, "steps_per_second": a.steps / seconds if a.steps else 0}
    if a.val_data:
        val = np.fromfile(a.val_data, dtype=np.dtype(a.data_format).newbyteorder("<"))
        with torch.no_grad():
            out["val_loss"] = sum(model(*rows(val, k, a.batch, a.seq)).item() for k in range(a.val_batches)) / a.val_batches
    if a.export:
        write_safetensors(a.export, model.state_dict())
    print(json.dumps(out))
    return 0


def build_model(name):
    if ":" in name:
        import importlib.util
        path, fn = name.rsplit(":", 1)
        spec = importlib.util.spec_from_file_location("tmmu_parity_model", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return getattr(mod, fn)()[0]
    import torchvision
    return getattr(torchvision.models, name)()


def train_images(a):
    if a.threads:
        torch.set_num_threads(a.threads)
    model = build_model(a.model)
    model.load_state_dict(read_safetensors(a.weights), strict=True)
    model.train()
    x = np.load(a.images)
    y = np.load(a.labels)
    if x.dtype == np.uint8:
        x = x.astype(np.float32) / 255
    if a.grads:
        xb = torch.from_numpy(np.ascontiguousarray(x[:a.batch]))
        yb = torch.from_numpy(y[:a.batch].astype(np.int64))
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        write_safetensors(a.grads, {n: p.grad for n, p in model.named_parameters()})
        print(json.dumps({"loss": loss.item()}))
        return 0
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps,
                            weight_decay=a.weight_decay)
    losses = []
    t0 = time.perf_counter()
    for k in range(a.steps):
        idx = [(k * a.batch + r) % len(x) for r in range(a.batch)]
        xb = torch.from_numpy(np.ascontiguousarray(x[idx]))
        yb = torch.from_numpy(y[idx].astype(np.int64))
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    seconds = time.perf_counter() - t0
    if a.export:
        write_safetensors(a.export, model.state_dict())
    print(json.dumps({"framework": "pytorch " + torch.__version__, "threads": torch.get_num_threads(), "losses": losses,
                      "seconds": seconds, "steps_per_second": a.steps / seconds if a.steps else 0}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
