#!/usr/bin/env python3
"""Exports a torchvision classification model with stock torch.onnx.export,
as TestTorchvisionExports does: export_torchvision.py NAME eval|train OUT
[OPSET]. Eval mode: the model in eval(), constants folded. Training mode:
training=TrainingMode.TRAINING (batch norms emit their running statistics,
dropout stays), no constant folding. Random weights, batch 1, 224×224
(inception_v3: 299). Exit 3 when PyTorch's exporter refuses the model
(its message on stderr)."""
import sys
import warnings

import torch
import torchvision

warnings.filterwarnings("ignore")
name, mode, out = sys.argv[1], sys.argv[2], sys.argv[3]
opset = int(sys.argv[4]) if len(sys.argv) > 4 else 14
torch.manual_seed(0)
m = getattr(torchvision.models, name)()
size = 299 if name == "inception_v3" else 224
x = torch.randn(1, 3, size, size)
try:
    if mode == "eval":
        m.eval()
        torch.onnx.export(m, (x,), out, opset_version=opset, input_names=["input"], output_names=["output"])
    else:
        m.train()
        torch.onnx.export(m, (x,), out, opset_version=opset, input_names=["input"], output_names=["output"],
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
except Exception as e:  # the exporter's own refusal
    print(f"{type(e).__name__}: {str(e).splitlines()[0]}", file=sys.stderr)
    sys.exit(3)
