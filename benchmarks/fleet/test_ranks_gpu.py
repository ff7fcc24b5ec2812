"""Multi-rank checks on GPUs (issue 51's GPU acceptance): the bodies of
tests/test_ranks.py on CUDA, 2 ranks over NCCL, one GPU per rank.

    python -m pytest benchmarks/fleet/test_ranks_gpu.py --compile-cache-check
        --compile-cache-rank-layout=index|pinned   (on a 2-GPU machine)

The plain torchrun pair on 2 x H200 (docs/fleet.md): DDP hits FX 2 / AOT 1 per rank warm;
with each rank on cuda:N (`index`) the rank-blind pass is no false hit (the device index
is in the key), with each rank seeing its GPU as cuda:0 (`pinned`) rank 1 loads rank 0's
entry and runs with its constant. The tensor-parallel MLP and pytorch#188332's all-gather
bucketing (`python benchmarks/fleet/plain_pair.py tp_mlp ag_bucket --device
cuda:index|cuda:pinned` is their plain pair) run in both layouts too.
"""
import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch._inductor.custom_graph_pass import CustomGraphPass


def device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device())


class FoldRank(CustomGraphPass):
    """relu(x @ w) * s, s the rank's scale (an input) -> the scale as a constant."""

    def __init__(self, keyed):
        self.rank, self.keyed = dist.get_rank(), keyed

    def __call__(self, graph):
        for node in list(graph.nodes):
            mul = node.op == "call_function" and node.target is torch.ops.aten.mul.Tensor
            first = node.args[0] if mul else None
            if isinstance(first, torch.fx.Node) and first.target is torch.ops.aten.relu.default:
                node.args = (first, float(self.rank + 1))

    def uuid(self):
        return ("fold-rank-v1", self.rank) if self.keyed else "fold-rank-v1"


def scaled(keyed):
    torch._inductor.config.post_grad_custom_post_pass = FoldRank(keyed)
    torch.manual_seed(0)
    x, w = torch.randn(4, 8, device=device()), torch.randn(8, 8, device=device())
    s = torch.tensor(float(dist.get_rank() + 1), device=device())
    with torch.no_grad():
        return torch.compile(lambda a, b, c: torch.relu(a @ b) * c + 1)(x, w, s)


@pytest.mark.compile_cache(ranks=2)
def test_ddp():
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to(device())
    model = DistributedDataParallel(torch.compile(net))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(1 + dist.get_rank())
    for _ in range(2):
        x, y = torch.randn(4, 8, device=device()), torch.randn(4, 4, device=device())
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


@pytest.mark.compile_cache(ranks=2)
def test_rank_blind_pass():
    assert scaled(keyed=False).shape == (4, 8)


@pytest.mark.compile_cache(ranks=2)
def test_tp_mlp():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel, RowwiseParallel, parallelize_module)

    mesh = init_device_mesh("cuda", (dist.get_world_size(),))
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16)).to(device())
    parallelize_module(mlp, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    with torch.no_grad():
        out = torch.compile(mlp)(torch.randn(4, 16, device=device()))
    assert out.shape == (4, 16)


@pytest.mark.compile_cache(ranks=2)
def test_ag_bucket():
    """pytorch#188332: the bucketing pass writes the rank into the graph after the key."""
    import torch.distributed._functional_collectives as funcol

    torch._inductor.config.bucket_all_gathers_fx = "all"

    def gathered(a, b):
        ga = funcol.all_gather_tensor(a, 0, dist.group.WORLD)
        gb = funcol.all_gather_tensor(b, 0, dist.group.WORLD)
        return torch.cat([ga * 2, gb + 1])

    torch.manual_seed(dist.get_rank())
    a, b = torch.randn(4, 8, device=device()), torch.randn(4, 8, device=device())
    assert torch.compile(gathered)(a, b).shape == (16, 8)
