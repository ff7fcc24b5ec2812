"""Mixed-precision training bodies in a real session (issue 36): fp16 autocast with a
GradScaler and SGD momentum, bf16 autocast with AdamW, several steps each. Their float64
run used to fail ("inv_scale must be a float tensor", "expected dtype double for
'end'"), and the fallback held them to float32's tolerance: healthy models failed. Now
the float64 rule judges them, and a compiled path 5% off still fails."""
from __future__ import annotations

import pytest

from conftest import RepoRun, run_repo

pytestmark = pytest.mark.slow

TESTS = '''
import pytest
import torch


class Net(torch.nn.Module):
    def __init__(self, off):
        super().__init__()
        self.off = off
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
        self.fc = torch.nn.Linear(8, 10)

    def forward(self, x):
        h = self.body(x)
        if torch.compiler.is_compiling():  # what a miscompile looks like
            h = h * self.off
        return self.fc(h)


def train(compile_cache, dtype, optimizer, steps, off):
    torch.manual_seed(0)
    model = Net(off)
    x, y = torch.randn(16, 3, 16, 16), torch.randint(0, 10, (16,))
    opt = (torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if optimizer == "sgd"
           else torch.optim.AdamW(model.parameters(), lr=1e-2))
    scaler = torch.amp.GradScaler("cpu", enabled=dtype == torch.float16)
    compiled = torch.compile(model)
    for step in range(steps):
        with torch.autocast("cpu", dtype=dtype):
            loss = torch.nn.functional.cross_entropy(compiled(x), y)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        compile_cache.record(f"loss{step}", loss)


@pytest.mark.compile_cache
@pytest.mark.parametrize("off", [1.0, 1.05], ids=["right", "off5"])
def test_fp16_gradscaler_sgd(compile_cache, off):
    train(compile_cache, torch.float16, "sgd", 2, off)


@pytest.mark.compile_cache
@pytest.mark.parametrize("off", [1.0, 1.05], ids=["right", "off5"])
def test_bf16_adamw(compile_cache, off):
    train(compile_cache, torch.bfloat16, "adamw", 3, off)
'''


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RepoRun:
    return run_repo(tmp_path_factory.mktemp("repo_amp"), {"test_amp_bodies.py": TESTS})


@pytest.mark.parametrize("name", ["test_fp16_gradscaler_sgd", "test_bf16_adamw"])
def test_amp_training_is_judged_against_its_float64_run(run: RepoRun, name: str) -> None:
    right, off = run.check(f"{name}[right]"), run.check(f"{name}[off5]")
    assert right["verdict"] == "pass", run.out[-4000:]
    cmp = right["outputs"]["warm_vs_eager"]
    assert cmp["float64"]["available"], cmp["float64"]["note"]
    assert cmp["rule"].startswith("assert_close defaults, else float64 reference"), cmp["rule"]
    assert right["outputs"]["warm_vs_cold"]["ok"]
    # 5% off: wrong math, named compiled vs eager against the float64 run
    assert off["verdict"] == "fail", run.out[-4000:]
    message = off["outputs"]["warm_vs_eager"]["mismatches"][0]["message"]
    assert "as far from a float64 run as eager" in message and "wrong math" in message
