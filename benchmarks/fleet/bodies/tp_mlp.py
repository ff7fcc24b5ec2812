"""A 2-way tensor-parallel MLP (Colwise then Rowwise over a DeviceMesh of the ranks'
device type), inference."""
import _rank
import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import (
    ColwiseParallel, RowwiseParallel, parallelize_module)

rank = _rank.start()
dev = _rank.device()
mesh = init_device_mesh(dev.type, (int(_rank.os.environ["WORLD_SIZE"]),))
torch.manual_seed(0)
mlp = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16)).to(dev)
parallelize_module(mlp, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
x = torch.randn(4, 16, device=dev)
with torch.no_grad():
    out = torch.compile(mlp)(x)
_rank.finish(out)
