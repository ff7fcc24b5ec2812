"""Checks of models that draw random numbers as people really train them: dropout,
stochastic depth (a `torch.rand(batch, 1) < p` mask on a residual branch), and noise
drawn inside a compiled test body (a random augmentation). Compiled code draws other
numbers than eager, so the tensors that change with the seed are named not comparable
with eager, and gated warm vs cold instead; every other tensor is judged as before."""
from __future__ import annotations

import pytest

from conftest import RepoRun, run_repo

pytestmark = pytest.mark.slow

MODELS = '''
import torch


class DropoutMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(16, 64)
        self.drop = torch.nn.Dropout(0.1)
        self.l2 = torch.nn.Linear(64, 4)

    def forward(self, x):
        return self.l2(self.drop(torch.relu(self.l1(x))))


class DropPath(torch.nn.Module):
    """A residual block whose branch is dropped per sample in training (timm's
    drop_path, torchvision's StochasticDepth)."""

    def __init__(self, p=0.2):
        super().__init__()
        self.p = p
        self.stem = torch.nn.Linear(16, 32)
        self.branch = torch.nn.Linear(32, 32)
        self.head = torch.nn.Linear(32, 4)

    def forward(self, x):
        h = self.stem(x)
        keep = (torch.rand(x.shape[0], 1, device=x.device) >= self.p).to(h.dtype)
        h = h + self.branch(torch.relu(h)) * keep / (1 - self.p)
        return self.head(h)
'''

TESTS = '''
import pytest
import torch

from random_models import DropoutMLP, DropPath
from pytest_compilecache import ModelCase


@pytest.fixture
def dropout_mlp():
    return ModelCase(DropoutMLP(), example_inputs=(torch.randn(32, 16),), train=True)


@pytest.fixture
def drop_path():
    return ModelCase(DropPath(), example_inputs=(torch.randn(32, 16),), train=True)


@pytest.mark.compile_cache
def test_dropout_training(dropout_mlp):
    ...


@pytest.mark.compile_cache
def test_drop_path_training(drop_path):
    ...


def augment(x, s):
    return torch.relu(x + torch.randn_like(x) * s)


@pytest.mark.compile_cache
def test_noise_in_a_compiled_body(compile_cache):
    x = torch.randn(64, 8)
    f = torch.compile(augment)
    compile_cache.record("mean", f(x, 0.1).mean())
    y = torch.randn(64, 8)  # drawn after a compiled call that drew noise
    g = torch.compile(lambda t: torch.tanh(t) * 2)
    compile_cache.record("after", g(y))
'''


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RepoRun:
    # dropout (test_dropout_training) is judged on its real record (tests/test_judges.py,
    # tests/test_orchestrator.py; tests/data/records/record.py records it from TESTS)
    return run_repo(tmp_path_factory.mktemp("repo_random"),
                    {"random_models.py": MODELS, "test_random_models.py": TESTS},
                    "-k", "not test_dropout_training")


def _random_note(c: dict) -> str:
    return next((n for n in c["notes"] if "not comparable" in n), "")


def test_drop_path_training_passes_with_its_random_tensors_named(run: RepoRun) -> None:
    c = run.check("test_drop_path_training")
    assert c["verdict"] == "pass", run.out[-4000:]
    random = set(c["outputs"]["random"])
    assert {"output", "grad.branch.weight"} <= random, random
    # the head's bias gradient does not depend on the mask: judged against eager
    assert "grad.head.bias" not in random
    assert "not comparable" in _random_note(c)


def test_noise_drawn_inside_a_compiled_body_is_named_random(run: RepoRun) -> None:
    c = run.check("test_noise_in_a_compiled_body")
    assert c["verdict"] == "pass", run.out[-4000:]
    assert c["form"] == "test_body"
    random = c["outputs"]["random"]
    assert "call0:augment" in random and "record:mean" in random, random
    # the generator outside compiled calls moves alike in every run: a fresh input drawn
    # after the noisy call is the same, so what is computed from it is judged as usual
    assert "record:after" not in random and "call1:<lambda>" not in random, random
    assert c["outputs"]["warm_vs_cold"]["ok"]
