"""Recompiles no cache can save: regional compilation (each repeated block compiled, the
PyTorch recipe) whose blocks pass or fail each other's guards. Real CPU compiles
(torch 2.13): one session, stacks of blocks, each compiled per block."""
from __future__ import annotations

from typing import Any, Dict

import pytest

from conftest import RepoRun, run_repo

pytestmark = pytest.mark.slow

TESTS = '''
import pytest
import torch


class Block(torch.nn.Module):
    def __init__(self, i, kind):
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)
        self.kind = kind
        self.scale = float(i + 1)   # a Python float: automatic dynamic absorbs it
        self.tag = f"block{i}"      # a string: a guard no dynamic shape absorbs

    def forward(self, x):
        if self.kind == "float":
            return torch.relu(self.lin(x)) * self.scale
        if self.kind == "tag":
            return torch.relu(self.lin(x)) + (1.0 if self.tag == "block0" else 2.0)
        if self.kind == "plus0":
            return torch.relu(self.lin(x)) + 0.0
        if self.kind == "tag0":  # the same graph, and a guard on the tag
            return torch.relu(self.lin(x)) + (0.0 if self.tag == "block0" else 0.0)
        return torch.relu(self.lin(x))


def run_stack(kind, compile_cache, n=12):
    torch.manual_seed(0)
    blocks = torch.nn.ModuleList(Block(i, kind) for i in range(n)).eval()
    for block in blocks:  # regional compilation
        block.compile()
    x = torch.randn(4, 16)
    with torch.no_grad():
        for block in blocks:
            x = block(x)
    compile_cache.record("y", x)


@pytest.mark.compile_cache
def test_identical_blocks(compile_cache):
    run_stack("same", compile_cache)


@pytest.mark.compile_cache
def test_blocks_differ_in_a_float(compile_cache):
    run_stack("float", compile_cache)


@pytest.mark.compile_cache
def test_blocks_differ_in_a_string(compile_cache):
    run_stack("tag", compile_cache)


@pytest.mark.compile_cache
def test_reset_between_calls(compile_cache):
    f = torch.compile(lambda x: torch.cos(x) * 3)
    compile_cache.record("first", f(torch.ones(8)))
    torch._dynamo.reset()  # as test suites do between cases: compiled code is dropped
    compile_cache.record("again", f(torch.ones(8)))


@pytest.mark.compile_cache
def test_only_the_warm_process_recompiles(compile_cache):
    # a restart that behaves unlike the first start (here: by phase, for the test)
    run_stack("tag0" if compile_cache.phase == "warm" else "plus0", compile_cache, n=3)
'''


@pytest.fixture(scope="module")
def stacks(tmp_path_factory: pytest.TempPathFactory) -> RepoRun:
    # the recompile limit, a warm run that recompiles more and a reset are judged on
    # their real records (tests/test_judges.py; record.py records them from TESTS)
    return run_repo(tmp_path_factory.mktemp("repo_regional"), {"test_regional.py": TESTS},
                    "-k", "test_identical_blocks or test_blocks_differ_in_a_float")


def _check(run: RepoRun, name: str) -> Dict[str, Any]:
    [c] = [c for c in run.report["checks"] if c["nodeid"].endswith(f"::{name}")]
    return c


def test_the_recipe_compiles_once_for_identical_blocks(stacks: RepoRun) -> None:
    c = _check(stacks, "test_identical_blocks")
    assert c["verdict"] == "pass", stacks.out[-3000:]
    for phase in ("cold", "warm"):
        d = c["dynamo"][phase]
        assert (d["frames_compiled"], d["recompiles"], d["limit_hits"]) == (1, 0, []), d
        assert d["codes"][0]["code"] == "forward (test_regional.py:14)"
    assert not [n for n in c["notes"] if n.startswith("recompiles:")]
    assert c["layers"]["fx_graph"]["state"] == "hit"


def test_a_float_recompiles_once_and_is_named(stacks: RepoRun) -> None:
    c = _check(stacks, "test_blocks_differ_in_a_float")
    assert c["verdict"] == "pass", stacks.out[-3000:]
    cold = c["dynamo"]["cold"]
    assert (cold["frames_compiled"], cold["recompiles"]) == (2, 1), cold
    assert cold["codes"][0]["guards"] == ["self.scale == 1.0 (test_regional.py:16 in forward)"]
    assert ("recompiles: cold and warm: forward (test_regional.py:14) compiled 2 times "
            "(1 recompile(s); "
            "guards that failed: self.scale == 1.0 (test_regional.py:16 in forward))"
            in c["notes"]), c["notes"]
    assert stacks.out.count("test_blocks_differ_in_a_float: cold and warm: forward") == 1, \
        stacks.out[-3000:]  # the summary's recompile section


def test_the_job_summary_lists_the_recompiles(stacks: RepoRun) -> None:
    from pytest_compilecache.render import markdown

    text = markdown.render(stacks.report)
    assert "### Recompiles (Dynamo traced a code object more than once" in text
    assert ("- `test_regional.py::test_blocks_differ_in_a_float`: cold and warm: forward "
            "(test_regional.py:14) compiled 2 times") in text, text


def test_a_torch_wrapper_frame_is_named_by_the_users_function_it_calls() -> None:
    """Dynamo compiles wrap_inline's `inner` (external_utils.py) for some calls, as on
    einops' layers: the report names the user's function."""
    from torch._dynamo.external_utils import wrap_inline

    from pytest_compilecache.judge import recompiles
    from pytest_compilecache.child.frames import user_function

    def rearrange_layer(x):
        return x * 2

    inner = wrap_inline(rearrange_layer)
    user = user_function(inner.__closure__)
    line = rearrange_layer.__code__.co_firstlineno
    assert user == f"rearrange_layer (test_recompiles.py:{line})"
    code = inner.__code__
    wrapper = f"inner (external_utils.py:{code.co_firstlineno})"
    entry = {"co_name": "inner", "co_filename": code.co_filename,
             "co_firstlineno": code.co_firstlineno}
    assert recompiles._code(entry, {wrapper: user}) == f"{user}, through torch's {wrapper}"
    assert recompiles._code(entry) == wrapper
