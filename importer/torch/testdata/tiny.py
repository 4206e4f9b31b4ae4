"""A small model for the tests of package importer/torch: a conv stem
with batch norm and an in-place ReLU, then an MLP head."""
import torch
from torch import nn


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.head = nn.Sequential(nn.Linear(8 * 8 * 8, 32), nn.GELU(), nn.Linear(32, 10))

    def forward(self, x):
        x = self.relu(self.bn(self.conv(x)))
        return self.head(x.flatten(1))


INPUT_SHAPE = (3, 8, 8)


def tiny():
    torch.manual_seed(0)
    return Tiny(), (torch.randn(4, *INPUT_SHAPE),), nn.functional.cross_entropy
