"""A 2-way tensor-parallel MLP (Colwise then Rowwise over a cpu DeviceMesh), inference."""
import _rank
import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import (
    ColwiseParallel, RowwiseParallel, parallelize_module)

rank = _rank.start()
mesh = init_device_mesh("cpu", (int(_rank.os.environ["WORLD_SIZE"]),))
torch.manual_seed(0)
mlp = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))
parallelize_module(mlp, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
x = torch.randn(4, 16)
with torch.no_grad():
    out = torch.compile(mlp)(x)
_rank.finish(out)
