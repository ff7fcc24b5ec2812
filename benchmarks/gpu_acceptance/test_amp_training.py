"""Training bodies as model repos write them: fp16 autocast with a GradScaler,
bf16 autocast with AdamW, and float32 SGD with momentum over two steps. Each test body
seeds itself, compiles torchvision's resnet18 with `torch.compile(model)` and records
each step's loss; the compiled calls' logits are recorded by the plugin.

    pytest --compile-cache-check benchmarks/gpu_acceptance/test_amp_training.py

`python benchmarks/gpu_acceptance/amp_plain_pair.py` runs the same bodies without the
plugin, cold then warm over one cache dir, for the verdict to stand beside.
PYTEST_COMPILECACHE_AMP_SMALL=1 shrinks the batch and images (a CPU try-out).
"""
import os
from typing import Any, Callable

import pytest
import torch

SMALL = os.environ.get("PYTEST_COMPILECACHE_AMP_SMALL") == "1"
BATCH, SIZE = (4, 32) if SMALL else (16, 64)
Record = Callable[[str, Any], None]


def _resnet18_and_batch(device: str) -> Any:
    """The model and one random batch, from the test's own seed."""
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).to(device)
    x = torch.randn(BATCH, 3, SIZE, SIZE, device=device)
    y = torch.randint(0, 10, (BATCH,), device=device)
    return model, x, y


def _train(device: str, record: Record, opt: Any, model: torch.nn.Module, x: Any, y: Any,
           steps: int, dtype: Any = None) -> torch.nn.Module:
    """The loop model repos write: forward under autocast (when `dtype`), a GradScaler
    (a pass-through but for float16), an optimizer step; each step's loss recorded."""
    scaler = torch.amp.GradScaler(device, enabled=dtype == torch.float16)
    compiled = torch.compile(model)
    for step in range(steps):
        with torch.autocast(device, dtype=dtype, enabled=dtype is not None):
            loss = torch.nn.functional.cross_entropy(compiled(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        record(f"loss{step}", loss)
        if scaler.is_enabled():  # a step skipped for an overflow in one run only shows here
            record(f"scale{step}", scaler.get_scale())
    return model


def fp16_gradscaler_sgd(device: str, record: Record, steps: int = 2) -> torch.nn.Module:
    """fp16 autocast with a GradScaler: the float64 reference failed on its float32
    contracts (`inv_scale must be a float tensor`), and the fallback held float16 logits
    to float32's tolerance."""
    model, x, y = _resnet18_and_batch(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    return _train(device, record, opt, model, x, y, steps, torch.float16)


def bf16_adamw(device: str, record: Record, steps: int = 2) -> torch.nn.Module:
    """bf16 autocast with AdamW: its state made by `zeros_like(param)` must stay the
    param's dtype in the float64 run (`expected dtype double for 'end'`)."""
    model, x, y = _resnet18_and_batch(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return _train(device, record, opt, model, x, y, steps, torch.bfloat16)


def fp32_sgd_momentum(device: str, record: Record, steps: int = 2) -> torch.nn.Module:
    """float32 SGD with momentum 0.9: the second loss carries the rounding the first
    update amplified (3.69x eager's float64 error on an H100, all of it noise)."""
    model, x, y = _resnet18_and_batch(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return _train(device, record, opt, model, x, y, steps)


BODIES = {"fp16_gradscaler_sgd": fp16_gradscaler_sgd, "bf16_adamw": bf16_adamw,
          "fp32_sgd_momentum": fp32_sgd_momentum}


@pytest.mark.compile_cache
def test_resnet18_fp16_autocast_gradscaler_sgd(compile_cache):
    fp16_gradscaler_sgd(compile_cache.device, compile_cache.record)


@pytest.mark.compile_cache
def test_resnet18_bf16_autocast_adamw_two_steps(compile_cache):
    bf16_adamw(compile_cache.device, compile_cache.record)


@pytest.mark.compile_cache
def test_resnet18_fp32_sgd_momentum_two_steps(compile_cache):
    fp32_sgd_momentum(compile_cache.device, compile_cache.record)
