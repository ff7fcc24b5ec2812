"""Keys without kernels (--compile-cache-keys-only, child/keysonly.py): a cold run that
stops each graph once its keys are logged records the same keys as a full cold compile,
graph for graph, forward and backward, in a fraction of its time (a convolution's training
forward, whose layout Inductor optimizes on a CPU with mkldnn as on a GPU, as far as
lowering: its backward's key holds the strides lowering chose); a torch that cannot stop
there compiles in full and says so."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Tuple

import pytest

from conftest import run_repo
from pytest_compilecache.child.keysonly import KeysOnly

TESTS = {
    "test_models.py": '''
import pytest
import torch
from pytest_compilecache import ModelCase
from models import Broken


@pytest.fixture
def broken_training():
    return ModelCase(Broken(), example_inputs=(torch.randn(8, 16),), train=True)


@pytest.mark.compile_cache
def test_broken_training(broken_training):
    ...


@pytest.mark.compile_cache
def test_conv_training(compile_cache):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).to(compile_cache.device)
    torch.compile(net)(torch.randn(2, 3, 8, 8, device=compile_cache.device)).sum().backward()
    compile_cache.record("grad", net[0].weight.grad)
''',
}


def _cold_keys(check: Dict[str, Any]) -> Dict[Tuple[str, str, bool], str]:
    return {(g["layer"], g["compile_id"], g.get("backward", False)): g["key"]
            for g in check["graphs"] if g["phase"] == "cold"}


@pytest.mark.slow
def test_keys_only_records_a_full_cold_runs_keys_graph_for_graph(tmp_path: Path) -> None:
    import torch
    import torch._inductor.utils

    # a thread each (the keys hold the thread count): two slots on two cores, so the
    # keys-only session's two recordings run side by side (controller/ahead.py). The full
    # session is a check, cold and warm, not a recording (--compile-cache-manifest-only):
    # its graph-break model passing graph for graph is test_checks_hit.py's (CI time)
    full = run_repo(tmp_path / "repo", TESTS, "--compile-cache-store=full",
                    "--compile-cache-threads=1")
    (tmp_path / "repo" / "report.json").rename(tmp_path / "repo" / "full.json")
    keys = run_repo(tmp_path / "repo", {}, "--compile-cache-keys-only",
                    "--compile-cache-store=keys", "--compile-cache-threads=1")
    (tmp_path / "repo" / "report.json").rename(tmp_path / "repo" / "keys.json")
    assert full.ret == 0 and keys.ret == 0, keys.out[-3000:]
    got = {c["nodeid"].split("::")[-1]: c for c in keys.report["checks"]}
    if (os.cpu_count() or 1) >= 2:  # side by side, a slot each
        a, b = (c["leases"][0] for c in keys.report["checks"])
        assert a["slot"] != b["slot"] and b["acquired"] < a["released"], (a, b)
    for c in full.report["checks"]:
        name = c["nodeid"].split("::")[-1]
        k = got[name]
        assert k["verdict"] == "recorded", k
        want = _cold_keys(c)
        assert want and _cold_keys(k) == want, (name, want, _cold_keys(k))
        # the graph break's two graphs and the training's backward are all there
        if name == "test_broken_training":
            assert {cid for _, cid, _ in want} == {"0/0", "1/0"}
            assert any(bwd for _, _, bwd in want)
        stopped = [n for n in k["notes"] if n.startswith("keys-only: ")]
        assert stopped and "graph(s) stopped before Inductor's code generation" in stopped[0]
        if name == "test_conv_training" and torch.backends.mkldnn.is_available() and hasattr(
                torch._inductor.utils, "set_tracing_context_output_strides"):
            # channels-last: stopped without lowering, its backward's key differed
            assert "1 training forward(s) stopped after lowering" in stopped[0], stopped
            assert "compiled in full" not in stopped[0], stopped
        # stopped before code generation: no kernel was built, nothing saved
        assert all(not g["saved"] for g in k["graphs"]), k["graphs"]
        assert k["timings"]["cold_s"] < c["timings"]["cold_s"], (k["timings"], c["timings"])
    # `diff` of the two reports: unchanged (what drift and bisect compare)
    from pytest_compilecache.cli import main as cli

    reports = [str(tmp_path / "repo" / name) for name in ("full.json", "keys.json")]
    assert cli(["diff", *reports]) == 0


def test_a_torch_that_cannot_stop_there_says_why_and_swaps_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import torch._inductor.compile_fx as cfx
    from torch._inductor.codecache import FxGraphCache

    before = cfx.fx_codegen_and_compile
    monkeypatch.delattr(FxGraphCache, "load_with_key")  # torch 2.5's FxGraphCache.load did it all
    stop = KeysOnly()
    assert stop.start() is False
    assert "load_with_key" in (stop.why_not or "") and "before code generation" in stop.why_not
    assert cfx.fx_codegen_and_compile is before
    stop.stop()


def test_the_stop_is_undone_after_the_workload() -> None:
    import torch._inductor.compile_fx as cfx
    from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache
    from torch._inductor.codecache import FxGraphCache

    before = (cfx.fx_codegen_and_compile, FxGraphCache.__dict__["_save_graph"],
              AOTAutogradCache.__dict__["save"])
    stop = KeysOnly()
    assert stop.start() is True and stop.why_not is None
    assert cfx.fx_codegen_and_compile is not before[0]
    stop.stop()
    assert (cfx.fx_codegen_and_compile, FxGraphCache.__dict__["_save_graph"],
            AOTAutogradCache.__dict__["save"]) == before
