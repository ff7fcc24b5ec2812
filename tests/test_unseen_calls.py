"""Compiled calls however they were made (issue 50, point 3): a function wrapped by
`torch._dynamo.optimize("inductor")`, a module compiled in place by `module.compile()`,
and a method wrapped by a compiled module's `dynamo_ctx` (Lightning's `from_compiled`
does `compiled.dynamo_ctx(module.training_step)`). Before, only what `torch.compile`
returned was recorded: these checks passed with `equal (0 compared)`. Where a check
sees no output at all, the terminal says it in one line, for a passing check too.

And a check that compiled nothing (point 4): `block.compile()` of torch's own
`nn.TransformerEncoderLayer` compiles 0 frames (every frame it runs is in Dynamo's skip
list; a plugin-free process compiles 0 frames too): the failure says Dynamo compiled 0
frames and torch's reason, and no comparison line claims `equal` over nothing.

One session, real CPU compiles of tiny models."""
from __future__ import annotations

import pytest

from conftest import RepoRun, run_repo

pytestmark = pytest.mark.slow

TESTS = '''
import pytest
import torch


def scale(x):
    return torch.sin(x) * 2 + 1


class Lit(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.lin(x)

    def training_step(self, x):
        return self(x).relu().sum()


@pytest.mark.compile_cache
def test_optimize(compile_cache):
    f = torch._dynamo.optimize("inductor")(scale)
    f(torch.randn(8))


@pytest.mark.compile_cache
def test_module_compile(compile_cache):
    m = Lit()  # a module of the test's own (torch's own would compile no frame: below)
    m.compile()
    with torch.no_grad():
        m(torch.randn(2, 8))


@pytest.mark.compile_cache
def test_dynamo_ctx(compile_cache):
    lit = Lit()
    compiled = torch.compile(lit)
    lit.training_step = compiled.dynamo_ctx(lit.training_step)  # as from_compiled does
    lit.training_step(torch.randn(2, 8)).backward()


@pytest.mark.compile_cache
def test_returns_nothing(compile_cache):
    x = torch.randn(8)
    torch.compile(update)(x)  # in place, returns nothing
    torch.compile(update)(x)


def update(t):
    t.mul_(2).add_(1)


@pytest.mark.compile_cache
def test_regional_torch_blocks(compile_cache):
    blocks = torch.nn.ModuleList(torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
                                 for _ in range(2)).eval()
    for block in blocks:
        block.compile()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        for block in blocks:
            x = block(x)
'''


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RepoRun:
    return run_repo(tmp_path_factory.mktemp("repo_unseen"), {"test_unseen.py": TESTS})


def _problems(c: dict) -> str:
    return "\n".join(c.get("problems") or [])


@pytest.mark.parametrize("name", ["test_optimize", "test_module_compile", "test_dynamo_ctx"])
def test_every_compiled_call_is_compared(run: RepoRun, name: str) -> None:
    c = run.check(name)
    assert c["verdict"] == "pass", _problems(c) + run.out[-3000:]
    out = c["outputs"]
    assert out["count"] >= 1 and out["warm_vs_cold"]["compared"] >= 1, out
    assert out["warm_vs_eager"]["compared"] >= 1, out
    assert f"{name}: outputs" not in run.out


def test_a_check_that_saw_no_output_says_so_on_the_terminal(run: RepoRun) -> None:
    c = run.check("test_returns_nothing")
    assert c["verdict"] == "pass", _problems(c) + run.out[-3000:]
    line = next(x for x in run.out.splitlines() if "test_returns_nothing: outputs" in x)
    assert "no output seen" in line and "2 compiled call(s)" in line, line
    assert "compile_cache.record" in line, line


def test_a_check_that_compiled_nothing_says_dynamo_compiled_no_frame(run: RepoRun) -> None:
    c = run.check("test_regional_torch_blocks")
    assert c["verdict"] == "fail", run.out[-3000:]
    text = _problems(c)
    assert "Dynamo compiled 0 frames" in text, text
    assert "_call_impl" in text and "skipfiles" in text, text
    assert "caches disabled, a backend other than inductor" not in text, text
    report = run.out.split("test_regional_torch_blocks")[-1]
    assert "equal (0 compared)" not in run.out and "outputs: warm vs cold" not in report
