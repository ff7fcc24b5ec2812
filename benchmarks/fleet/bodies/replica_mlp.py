"""A replica of one model: an MLP's inference, torch.compile'd, no process group."""
import _rank
import torch
from torch import nn

_rank.start()
torch.manual_seed(0)
mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))
x = torch.randn(4, 16)
with torch.no_grad():
    out = torch.compile(mlp)(x)
_rank.finish(out)
