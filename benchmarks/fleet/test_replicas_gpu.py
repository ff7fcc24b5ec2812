"""Replicas on GPUs (issue 51 point 4's GPU acceptance): N single-process replicas warm
at once over one cache built once, one GPU each, seen as cuda:0.

    python -m pytest benchmarks/fleet/test_replicas_gpu.py --compile-cache-check
        (on a 2-GPU machine; replicas=2 each: cold on the first GPU, warm on both)

The plain truth beside it: `python benchmarks/fleet/plain_replicas.py mlp convnet
resnet18 --device cuda --replicas 2` (docs/fleet.md).
"""
import pytest
import torch
from torch import nn


def device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device())


@pytest.mark.compile_cache(replicas=2)
def test_mlp():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8)).to(device()).eval()
    with torch.no_grad():
        assert torch.compile(net)(torch.randn(16, 32, device=device())).shape == (16, 8)


@pytest.mark.compile_cache(replicas=2)
def test_convnet():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(8, 4)).to(device()).eval()
    with torch.no_grad():
        assert torch.compile(net)(torch.randn(2, 3, 16, 16, device=device())).shape == (2, 4)


@pytest.mark.compile_cache(replicas=2)
def test_resnet18():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    net = torchvision.models.resnet18().to(device()).eval()
    with torch.no_grad():
        out = torch.compile(net)(torch.randn(2, 3, 64, 64, device=device()))
    assert out.shape == (2, 1000)
