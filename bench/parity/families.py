"""Small members of the model families tmmu import torch is checked on,
for the gradient checks: the ops of torchvision's resnets, mobilenets and
vision transformers at sizes a test runs in seconds. Each builder returns
(module, example inputs, loss function, labels), as tmmu import torch
FILE.py:NAME takes them; dropout is kept but with p = 0, so PyTorch's
random mask (which tmmu does not draw) changes nothing.
"""

import torch
import torchvision
from torch import nn


def _images(batch, size=32, classes=10):
    torch.manual_seed(0)
    return torch.randn(batch, 3, size, size), torch.randint(0, classes, (batch,))


def _no_dropout(m):
    for mod in m.modules():
        if isinstance(mod, nn.Dropout):
            mod.p = 0.0
    return m


def resnet(batch=4):
    """torchvision's resnet18 with 10 classes."""
    x, y = _images(batch)
    torch.manual_seed(0)
    return torchvision.models.resnet18(num_classes=10), (x,), nn.functional.cross_entropy, y


def mobilenet(batch=4):
    """torchvision's mobilenet_v3_large (depthwise convolutions,
    hardswish, squeeze-excitation), 10 classes, dropout p = 0."""
    x, y = _images(batch)
    torch.manual_seed(0)
    return _no_dropout(torchvision.models.mobilenet_v3_large(num_classes=10)), (x,), nn.functional.cross_entropy, y


def vit(batch=4):
    """torchvision's VisionTransformer (vit_b_16's code) at 32×32 with
    patches of 8, 2 layers of width 32: class token, position embedding,
    multi-head attention, erf GELU, layer norms."""
    x, y = _images(batch)
    torch.manual_seed(0)
    m = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                             hidden_dim=32, mlp_dim=64, num_classes=10)
    # torchvision zeroes the head, which would leave every other gradient
    # zero: a small random head makes the check reach every layer.
    nn.init.normal_(m.heads.head.weight, std=0.5)
    return _no_dropout(m), (x,), nn.functional.cross_entropy, y
