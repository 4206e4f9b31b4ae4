"""Writes the ONNX test models of package importer/onnx with PyTorch's
exporter (Debian: apt-get install python3-torch python3-onnx; run with
/usr/bin/python3 gen.py in this folder). The weights are random and
small; what the tests read is the graph.

  tinycnn.onnx        conv, batchnorm, relu, max pool, residual add,
                      global average pool, flatten, gemm; dynamic batch
                      ("batch"); with value_info from onnx's shape inference
  tinycnn-noinfo.onnx the same graph with no value_info: tmmu infers shapes
  tinyattn.onnx       a transformer block (layernorm, matmul, reshape,
                      transpose, softmax, gelu) with dynamic batch and
                      sequence ("batch", "seq"), no value_info
  tinygpt.onnx        the exporter's GPT-2 (importer/torch/tmmu_export.py)
                      at 1 layer, width 16, vocabulary 64: embedding
                      gathers, arange (Range), a causal mask (Trilu,
                      Where); dynamic batch, with value_info
  tinywin.onnx        torchvision's shifted-window attention (swin: pads
                      computed from the shape with Mod, a mask written by
                      slice assignment, ScatterND, rolls) and an Einsum
                      attention as maxvit writes it; with value_info
  tinywin-noinfo.onnx the same graph with no value_info

With file names as arguments it writes only those files.
"""
import os
import sys

import onnx
import torch
from torch import nn
from torchvision.models.swin_transformer import shifted_window_attention

torch.manual_seed(0)


class TinyCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn1(self.conv1(x))))
        x = torch.relu(self.conv2(x) + x)
        x = nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


class TinyAttn(nn.Module):
    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.ln = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln(x)).split(d, dim=-1)
        q = q.reshape(b, s, self.heads, d // self.heads).transpose(1, 2)
        k = k.reshape(b, s, self.heads, d // self.heads).transpose(1, 2)
        v = v.reshape(b, s, self.heads, d // self.heads).transpose(1, 2)
        a = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        y = (a @ v).transpose(1, 2).reshape(b, s, d)
        x = x + self.proj(y)
        return x + self.mlp(x)


class TinyWin(nn.Module):
    def __init__(self, d=8, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.bias = nn.Parameter(torch.randn(heads, 16, 16) * 0.02)
        self.q = nn.Linear(d, d)

    def forward(self, x):
        y = shifted_window_attention(x, self.qkv.weight, self.proj.weight, self.bias, [4, 4], self.heads, [2, 2],
                                     qkv_bias=self.qkv.bias, proj_bias=self.proj.bias)
        b, h, w, d = y.shape
        t = self.q(y).reshape(b, 1, self.heads, h * w, d // self.heads)
        a = torch.softmax(torch.einsum("B G H I D, B G H J D -> B G H I J", t, t), dim=-1)
        o = torch.einsum("B G H I J, B G H J D -> B G H I D", a, t)
        return o.reshape(b, h, w, d) + x


def export(model, args, path, names, dynamic, infer):
    model.eval()
    torch.onnx.export(model, args, path, input_names=names, output_names=["y"],
                      dynamic_axes=dynamic, opset_version=13, do_constant_folding=True)
    m = onnx.load(path)
    if infer:
        m = onnx.shape_inference.infer_shapes(m)
    else:
        del m.graph.value_info[:]
    onnx.checker.check_model(m)
    onnx.save(m, path)


def tiny():
    export(TinyCNN(), torch.randn(2, 3, 32, 32), "tinycnn.onnx", ["x"], {"x": {0: "batch"}, "y": {0: "batch"}}, True)
    export(TinyCNN(), torch.randn(2, 3, 32, 32), "tinycnn-noinfo.onnx", ["x"], {"x": {0: "batch"}, "y": {0: "batch"}}, False)
    export(TinyAttn(), torch.randn(2, 8, 16), "tinyattn.onnx", ["x"], {"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}}, False)


def tinygpt():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "torch"))
    from tmmu_export import GPT2

    torch.manual_seed(0)
    gpt = GPT2(layers=1, d=16, heads=2, vocab=64, context=16)
    gpt.eval()
    torch.onnx.export(gpt, (torch.randint(0, 64, (2, 16)),), "tinygpt.onnx", input_names=["idx"], output_names=["logits"],
                      dynamic_axes={"idx": {0: "batch"}, "logits": {0: "batch"}}, opset_version=14)
    onnx.save(onnx.shape_inference.infer_shapes(onnx.load("tinygpt.onnx")), "tinygpt.onnx")


def tinywin():
    # Static shapes, as the torchvision tests export: 6x6 is padded to two
    # 4x4 windows a side.
    torch.manual_seed(0)
    for name, infer in (("tinywin.onnx", True), ("tinywin-noinfo.onnx", False)):
        export(TinyWin(), torch.randn(1, 6, 6, 8), name, ["x"], None, infer)


writers = {"tinycnn.onnx": tiny, "tinycnn-noinfo.onnx": tiny, "tinyattn.onnx": tiny, "tinygpt.onnx": tinygpt,
           "tinywin.onnx": tinywin, "tinywin-noinfo.onnx": tinywin}
for w in dict.fromkeys(writers[f] for f in (sys.argv[1:] or writers)):
    w()
