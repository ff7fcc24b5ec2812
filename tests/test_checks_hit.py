"""Real cold/warm checks of tiny models on CPU Inductor: what must hit, hits; the
classic never-saved AOTAutograd entry is caught with its cause. numpy is blocked, as
in a fresh venv with torch alone."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from conftest import NO_NUMPY, RepoRun, run_repo

pytestmark = pytest.mark.slow

TESTS = '''
import pytest
import torch

from models import MLP, Broken
from pytest_compilecache import ModelCase


@pytest.fixture
def mlp_inference():
    return ModelCase(MLP(), example_inputs=(torch.randn(4, 16),))


@pytest.fixture
def mlp_training():
    return ModelCase(MLP(), example_inputs=(torch.randn(4, 16),), train=True)


@pytest.fixture
def mlp_forward_with_grad():
    return ModelCase(MLP(), example_inputs=(torch.randn(4, 16),), no_grad=False)


@pytest.fixture
def broken_training():
    return ModelCase(Broken(), example_inputs=(torch.randn(4, 16),), train=True)


@pytest.mark.compile_cache
def test_inference(mlp_inference):
    ...


@pytest.mark.compile_cache
def test_training(mlp_training):
    ...


@pytest.mark.compile_cache
def test_graph_break(broken_training):
    ...


@pytest.mark.compile_cache
def test_forward_without_backward(mlp_forward_with_grad):
    ...


@pytest.mark.compile_cache
def test_body(compile_cache):
    with pytest.raises(ImportError):  # as in a fresh venv: torch brings no numpy
        import numpy  # noqa: F401
    model = MLP().to(compile_cache.device).eval()
    x = torch.randn(4, 16, device=compile_cache.device)
    with torch.no_grad():
        y = torch.compile(model)(x)
    compile_cache.record("twice", y * 2)
    assert y.shape == (4, 4)
'''


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RepoRun:
    path = tmp_path_factory.mktemp("repo_hit")
    # the graph-break model's cold and warm pass, graph for graph: tests/test_keys_only.py's
    # full session runs it (CI time)
    return run_repo(path, {"test_models.py": TESTS, "sitecustomize.py": NO_NUMPY},
                    f"--junitxml={path / 'junit.xml'}", "-k", "not test_graph_break")


def _layers(check):
    return {k: v["state"] for k, v in check["layers"].items()}


def test_inference_hits_every_applicable_layer(run: RepoRun) -> None:
    c = run.check("test_inference")
    assert c["verdict"] == "pass", run.out[-3000:]
    # a plain log (not -v, not a terminal) shows no phase lines and nothing live
    assert "[cold phase" not in run.out and "\b" not in run.out
    assert "    cold phase: " not in run.out
    # no job id in this session's environment: PGO persists nothing, and costs nothing here
    assert _layers(c) == {"dynamo_pgo": "off", "aot_autograd": "hit", "fx_graph": "hit",
                          "kernels": "hit", "autotune": "n/a"}
    assert c["layers"]["dynamo_pgo"]["reasons"] == [
        "no job id: PGO state is not persisted across restarts"]
    assert "autotuning" in c["layers"]["autotune"]["reasons"][0]
    assert c["outputs"]["warm_vs_cold"]["ok"]
    assert c["outputs"]["warm_vs_cold"]["mode"] == "bitwise, else float64 reference"
    assert c["outputs"]["warm_vs_eager"]["ok"]
    assert c["outputs"]["warm_vs_eager"]["float64"]["available"] is True
    assert "else float64 reference" in c["outputs"]["warm_vs_eager"]["rule"]


def test_training_step_hits_and_compares_gradients(run: RepoRun) -> None:
    c = run.check("test_training")
    assert c["verdict"] == "pass", run.out[-3000:]
    assert _layers(c)["aot_autograd"] == "hit"
    warm_fx = [g for g in c["graphs"] if g["phase"] == "warm" and g["layer"] == "fx_graph"]
    assert {g["backward"] for g in warm_fx} == {False, True}
    assert all(g["state"] == "hit" for g in warm_fx)
    assert c["outputs"]["warm_vs_cold"]["compared"] >= 5  # output + 4 gradients
    eager = c["outputs"]["warm_vs_eager"]
    assert eager["gradients_gated"] is True and eager["ungated_gradients"] == []


def test_body_form_records_every_compiled_call(run: RepoRun) -> None:
    c = run.check("test_body")
    assert c["verdict"] == "pass", run.out[-3000:]
    assert c["form"] == "test_body"
    assert c["outputs"]["warm_vs_cold"]["compared"] == 2  # the compiled call + record()
    assert c["outputs"]["warm_vs_eager"]["ok"] is True
    assert c["outputs"]["warm_vs_eager"]["float64"]["available"] is True  # the body in float64


def test_forward_without_backward_is_flagged_never_saved(run: RepoRun) -> None:
    c = run.check("test_forward_without_backward")
    assert c["verdict"] == "fail"
    aot = c["layers"]["aot_autograd"]
    assert aot["state"] == "miss"
    assert "never saved" in aot["reasons"][0] and "no backward ran" in aot["reasons"][0]
    assert c["layers"]["fx_graph"]["state"] == "hit"
    cold = [g for g in c["graphs"] if g["phase"] == "cold" and g["layer"] == "aot_autograd"]
    assert cold and cold[0]["saved"] is False
    assert "never saved: the forward ran with grad enabled" in run.out


def test_session_exit_status_and_summary(run: RepoRun) -> None:
    assert run.ret == 1
    assert "3 passed" in run.out and "1 failed" in run.out
    assert "compile-cache summary" in run.out
    row = next(line for line in run.out.splitlines() if "::test_training " in line
               and line.split()[1:2] == ["pass"])
    assert row.split()[2:7] == ["off", "hit", "hit", "hit", "n/a"]


def test_report_is_versioned_and_carries_keys(run: RepoRun) -> None:
    r = run.report
    assert r["schema"] == "pytest-compilecache/report" and r["schema_version"] == 4
    assert r["summary"] == {"pass": 3, "fail": 1, "error": 0, "recorded": 0, "n/a": 0,
                            "not run": 0}
    assert r["exitstatus"] == 1 and r["interrupted"] is None
    c = run.check("test_inference")
    assert c["versions"]["torch"].startswith("2.") and c["device"] == "cpu"
    t = c["timings"]
    assert {"cold_s", "warm_s", "cold_process_s", "warm_process_s"} <= set(t)
    assert all(v >= 0 for v in t.values()) and t["cold_s"] > 0 and t["warm_s"] > 0
    for phase in ("cold", "warm"):  # the stages and the compile+run partition the process
        stages = [t[f"{phase}_{s}_s"] for s in ("startup", "setup", "eager", "record", "exit")]
        assert abs(sum(stages) + t[f"{phase}_s"] - t[f"{phase}_process_s"]) < 0.5, t
        # forked from a preloaded interpreter: torch was imported before the phase began
        assert c["launch"][phase] == "forked", c
    # a graph that hit keeps its key and its components' digest; a miss keeps them all
    fx = next(g for g in c["graphs"] if g["layer"] == "fx_graph" and g["phase"] == "cold")
    assert "components" not in fx and len(fx["components_digest"]) == 64
    assert fx["components_count"] > 100
    missed = run.check("test_forward_without_backward")
    aot = next(g for g in missed["graphs"] if g["layer"] == "aot_autograd" and g["phase"] == "cold")
    assert {"gm", "torch_version"} <= {comp[0] for comp in aot["components"]}


def test_cache_roots_are_private_and_kept_only_on_failure(run: RepoRun) -> None:
    assert run.check("test_inference")["cache_root"] is None
    kept = Path(run.check("test_forward_without_backward")["cache_root"])
    assert (kept / "inductor" / "fxgraph").is_dir()
    assert stat.S_IMODE(os.stat(kept).st_mode) == 0o700
    assert f"cache root kept: {kept}" in run.out


def test_junit_properties_and_annotation_at_the_test(run: RepoRun) -> None:
    import xml.etree.ElementTree as ET

    from pytest_compilecache.render import gha

    root = Path(run.report["rootdir"])
    cases = {tc.get("name"): {p.get("name"): p.get("value") for p in tc.iter("property")}
             for tc in ET.parse(root / "junit.xml").getroot().iter("testcase")}
    props = cases["test_forward_without_backward"]
    assert props["compile_cache.verdict"] == "fail"
    assert props["compile_cache.aot_autograd"] == "miss" and props["compile_cache.fx_graph"] == "hit"
    assert float(props["compile_cache.warm_s"]) > 0
    assert cases["test_inference"]["compile_cache.verdict"] == "pass"
    # the failure's message, there and in the short test summary, is its first reason
    (failure,) = [tc.find("failure") for tc in ET.parse(root / "junit.xml").getroot().iter(
        "testcase") if tc.get("name") == "test_forward_without_backward"]
    assert failure.get("message").startswith("aot_autograd: miss - graph 0/0: never saved"), \
        failure.get("message")
    assert "FAILED test_models.py::test_forward_without_backward - aot_autograd: miss" \
        in run.out, run.out[-2000:]
    # the annotation points at the test's definition, relative to the repository root
    line = TESTS.splitlines().index("def test_forward_without_backward(mlp_forward_with_grad):")
    c = run.check("test_forward_without_backward")
    assert c["location"]["file"] == "test_models.py" and c["location"]["line"] in (line, line + 1)
    errors = [a for a in gha.annotation_lines(run.report, str(root.parent))
              if a.startswith("::error")]
    assert errors == [errors[0]] and errors[0].startswith(
        f"::error file={root.name}/test_models.py,line={c['location']['line']},"
        f"title=compile-cache%3A aot_autograd miss::test_models.py::test_forward_without_backward%0A"
        f"aot_autograd: graph 0/0: never saved")
