"""Warm-start paths other than the local restart (--compile-cache-via), checked with real
CPU compiles: the mega-cache, caching precompile, an AOT-compiled function and an
AOTInductor package, each carried to an empty cache root at another path. Three sessions,
so that each path runs only on the models that tell something about it (AOTInductor
builds a whole .so per model: about 30 s on this machine)."""
from __future__ import annotations

import pytest

from conftest import RepoRun, run_repo

pytestmark = pytest.mark.slow

TESTS = '''
import pytest
import torch

from pytest_compilecache import ModelCase


class Fused(torch.nn.Module):  # relu, sin: Inductor writes C++ kernels for them
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(16, 16)

    def forward(self, x):
        return torch.relu(self.l1(x)).sin()


@pytest.fixture
def fused():
    return ModelCase(Fused(), example_inputs=(torch.randn(4, 16),))


@pytest.fixture
def linear():  # one addmm: an extern call, no generated C++ kernel
    return ModelCase(torch.nn.Linear(16, 4), example_inputs=(torch.randn(4, 16),))


@pytest.mark.compile_cache
def test_fused(fused):
    ...


@pytest.mark.compile_cache
def test_linear(linear):
    ...


@pytest.mark.compile_cache
def test_linear_damaged(linear):
    ...


@pytest.fixture
def local_class():  # a class defined in a fixture: common in tests, and a local type
    class Local(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l1 = torch.nn.Linear(16, 4)

        def forward(self, x):
            return self.l1(x)

    return ModelCase(Local(), example_inputs=(torch.randn(4, 16),))


@pytest.mark.compile_cache
def test_local_class(local_class):
    ...


class Printing(torch.nn.Module):  # print() is a graph break: no full graph
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(16, 4)

    def forward(self, x):
        print("forward")
        return self.l1(x)


@pytest.mark.compile_cache
def test_body():  # the test-body form: aot and aoti need a ModelCase
    torch.compile(torch.nn.Linear(16, 4))(torch.randn(4, 16))


@pytest.fixture
def printing():
    return ModelCase(Printing(), example_inputs=(torch.randn(4, 16),))


@pytest.mark.compile_cache
def test_printing(printing):
    ...


@pytest.fixture
def training():
    return ModelCase(torch.nn.Linear(16, 4), example_inputs=(torch.randn(4, 16),), train=True)


@pytest.mark.compile_cache
def test_training(training):
    ...
'''

# the artifact is damaged in transit: truncated between the cold and the warm process
CONFTEST = '''
def pytest_compilecache_between_phases(item, cache_root):
    for artifact in (cache_root / "phases").glob("artifact.*"):
        if item.name == "test_linear_damaged":
            data = artifact.read_bytes()
            artifact.write_bytes(data[: len(data) // 3])
'''


def _repo(factory: pytest.TempPathFactory, name: str, via: str, *tests: str) -> RepoRun:
    path = factory.mktemp(name)
    return run_repo(path, {"test_paths.py": TESTS, "conftest.py": CONFTEST},
                    f"--compile-cache-via={via}", f"--junitxml={path / 'junit.xml'}",
                    "-k", " or ".join(tests))


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RepoRun:
    # a damaged artifact's load is named on the precompile path (`traced`: the same
    # loader, CachingPrecompile being a MegaCache), CI time
    return _repo(tmp_path_factory, "repo_mega", "local,mega", "test_fused",
                 "(test_linear and not damaged)")


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> RepoRun:
    """The paths that keep torch.compile: caching precompile and aot_compile."""
    return _repo(tmp_path_factory, "repo_traced", "precompile,aot", "test_linear",
                 "test_linear_damaged", "test_local_class", "test_printing", "test_body")


@pytest.fixture(scope="module")
def packaged(tmp_path_factory: pytest.TempPathFactory) -> RepoRun:
    """AOTInductor: a package with the model's compiled .so, loaded without compiling."""
    return _repo(tmp_path_factory, "repo_aoti", "aoti", "test_fused", "test_linear_damaged",
                 "test_training")


def _check(run: RepoRun, name: str, via: str) -> dict:
    [c] = [c for c in run.report["checks"] if c["nodeid"].endswith(f"::{name}") and c["via"] == via]
    return c


def test_each_path_is_a_result_of_its_own(run: RepoRun) -> None:
    assert sorted((c["nodeid"].split("::")[1], c["via"]) for c in run.report["checks"]) == [
        ("test_fused", "local"), ("test_fused", "mega"), ("test_linear", "local"),
        ("test_linear", "mega")]
    assert "test_paths.py::test_fused [via mega]" in run.out
    assert run.ret == 1 and "1 failed, 1 passed" in run.out


def test_mega_cache_without_the_compiled_cpp_kernels_fails_naming_them(run: RepoRun) -> None:
    assert _check(run, "test_fused", "local")["verdict"] == "pass", run.out[-3000:]
    c = _check(run, "test_fused", "mega")
    assert c["verdict"] == "fail"
    kernels = c["layers"]["kernels"]
    assert kernels["state"] == "miss"
    why = kernels["reasons"][0]
    assert "rebuilt 1 C++ kernel object(s)" in why and ".so" in why
    assert "the mega-cache did not carry" in why and "pytorch#172542" in why
    # torch's CPU capability probes, rebuilt in any empty cache dir, are not blamed
    assert not any("_chk_kernel" in f or "isa" in f for f in kernels["files"])
    assert any("CPU capability probes" in n for n in c["notes"])
    # the artifact itself loaded: the graphs hit from it, in a root that started empty
    assert c["layers"]["fx_graph"]["state"] == "hit" and c["layers"]["aot_autograd"]["state"] == "hit"
    assert any(n.startswith("mega: ") and "bytes saved" in n for n in c["notes"])
    assert c["outputs"]["warm_vs_cold"]["ok"] and c["outputs"]["warm_vs_cold"]["compared"] == 1


def test_mega_cache_that_carries_everything_passes(run: RepoRun) -> None:
    c = _check(run, "test_linear", "mega")
    assert c["verdict"] == "pass", run.out[-3000:]
    assert c["layers"]["fx_graph"]["state"] == "hit"
    assert c["outputs"]["warm_vs_cold"]["ok"] and c["outputs"]["warm_vs_eager"]["ok"]


def test_junit_has_the_properties_of_each_path(run: RepoRun) -> None:
    import xml.etree.ElementTree as ET
    from pathlib import Path

    root = Path(run.report["rootdir"])
    cases = {tc.get("name"): {p.get("name"): p.get("value") for p in tc.iter("property")}
             for tc in ET.parse(root / "junit.xml").getroot().iter("testcase")}
    assert cases["test_fused"]["compile_cache.verdict"] == "pass"
    assert cases["test_fused"]["compile_cache.mega.verdict"] == "fail"
    assert cases["test_fused"]["compile_cache.mega.kernels"] == "miss"


def test_caching_precompile_skips_dynamo_in_the_warm_process(traced: RepoRun) -> None:
    c = _check(traced, "test_linear", "precompile")
    assert c["verdict"] == "pass", traced.out[-3000:]
    # the Dynamo package short-circuits the AOTAutograd and FX lookups altogether
    assert c["layers"]["fx_graph"]["state"] == "n/a"
    assert "Dynamo precompile cache" in c["layers"]["fx_graph"]["reasons"][0]
    assert c["outputs"]["warm_vs_cold"]["ok"] and c["outputs"]["warm_vs_eager"]["ok"]
    # the guards it drops, which a differing process would no longer be stopped by
    assert any(n.startswith("precompile: ") and "guard(s) dropped" in n for n in c["notes"])
    # its phases fork, beside the aot path's, though TORCH_CACHING_PRECOMPILE is read as
    # torch._dynamo.config runs (launch/envspy.py redoes it in the phase)
    assert c["launch"] == {"cold": "forked", "warm": "forked"}, c["launch"]


def test_caching_precompile_names_a_guard_it_cannot_serialise(traced: RepoRun) -> None:
    c = _check(traced, "test_local_class", "precompile")
    assert c["verdict"] == "fail"
    [why] = c["problems"]
    assert why.startswith("precompile: the cold workload fails with caching precompile on "
                          "(TORCH_CACHING_PRECOMPILE=1)"), why
    assert "defined in local scope" in why and "global scope" in why


def test_aot_compiled_function_loads_without_compiling(traced: RepoRun) -> None:
    c = _check(traced, "test_linear", "aot")
    assert c["verdict"] == "pass", traced.out[-3000:]
    assert not c["problems"]
    assert c["outputs"]["warm_vs_cold"]["ok"] and c["outputs"]["warm_vs_eager"]["ok"]
    assert c["timings"]["warm_load_s"] is not None


def test_a_path_the_workload_cannot_take_is_not_applicable(traced: RepoRun) -> None:
    body = _check(traced, "test_body", "aot")
    assert body["verdict"] == "n/a" and "needs a ModelCase" in body["notes"][0]
    broken = _check(traced, "test_printing", "aot")
    assert broken["verdict"] == "n/a"
    assert "aot_compile could not compile this model" in broken["notes"][0]
    assert "print" in broken["notes"][0]
    # the test-body form takes precompile: it ran both phases there
    assert _check(traced, "test_body", "precompile")["timings"].get("warm_s") is not None
    # n/a fails nothing: precompile passes a graph break, aot is n/a, the test passes
    assert _check(traced, "test_printing", "precompile")["verdict"] == "pass", traced.out[-3000:]
    assert "PASSED test_paths.py::test_printing" in traced.out
    assert "warm start by path" in traced.out


def test_damaged_artifacts_fail_naming_the_load(traced: RepoRun, packaged: RepoRun) -> None:
    c = _check(traced, "test_linear_damaged", "precompile")
    assert c["verdict"] == "fail" and "load_cache_artifacts() returned None" in c["problems"][0]
    c = _check(traced, "test_linear_damaged", "aot")
    assert c["verdict"] == "fail"
    assert c["problems"][0].startswith("aot: torch.compiler.load_compiled_function could not "
                                       "load what the cold process saved"), c["problems"]
    c = _check(packaged, "test_linear_damaged", "aoti")
    assert c["verdict"] == "fail"
    assert c["problems"][0].startswith("aoti: torch._inductor.aoti_load_package could not "
                                       "load the package"), c["problems"]


def test_aoti_package_carries_the_compiled_kernels(packaged: RepoRun) -> None:
    c = _check(packaged, "test_fused", "aoti")
    assert c["verdict"] == "pass", packaged.out[-3000:]
    assert c["layers"]["kernels"]["state"] == "n/a" and not c["layers"]["kernels"]["files"]
    assert c["outputs"]["warm_vs_cold"]["ok"] and c["outputs"]["warm_vs_eager"]["ok"]
    # only the aoti path ran: no local restart unless asked for
    assert {x["via"] for x in packaged.report["checks"]} == {"aoti"}
    training = _check(packaged, "test_training", "aoti")
    assert training["verdict"] == "n/a" and "inference only" in training["notes"][0]


def test_a_warm_process_that_dies_in_the_loader_is_the_path_failing() -> None:
    """AOTInductor packages built on an H100 (torch 2.11+cu130) crash every fresh process
    that loads them, even a 3-layer MLP without the plugin (aoti_pair.py): that is
    the path failing on this machine, not an error of the plugin or the model."""
    from pytest_compilecache import paths
    from pytest_compilecache.model import error_result

    tail = ('  File ".../torch/_inductor/__init__.py", line 267 in aoti_load_package\n'
            '  File ".../pytest_compilecache/paths/aoti.py", line 62 in compile')

    def crash():
        return error_result("t.py::test_m", "warm", "crashed or exited early (exit code -11) "
                            "without a result (peak resident memory 802 MB)", tail, {})

    res = paths.builtin()["aoti"]().failed("warm", {}, crash())
    assert res.verdict == "fail"
    assert res.problems[0].startswith("aoti: the warm process died inside torch's "
                                      "aoti_load_package (warm phase crashed"), res.problems
    assert "aoti_load_package" in (res.error or "")  # the log tail stays for the details
    other = error_result("t.py::test_m", "warm", "failed", "Traceback: ValueError", {})
    assert paths.builtin()["aoti"]().failed("warm", {}, other).verdict == "error"
    assert paths.builtin()["local"]().failed("warm", {}, crash()).verdict == "error"
