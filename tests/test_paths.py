"""Warm-start paths other than the local restart (--compile-cache-via), checked with real
CPU compiles: the mega-cache carried to an empty cache root at another path."""
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
'''

# the artifact is damaged in transit: truncated between the cold and the warm process
CONFTEST = '''
def pytest_compilecache_between_phases(item, cache_root):
    artifact = cache_root / "phases" / "artifact.bin"
    if item.name == "test_linear_damaged" and artifact.exists():
        data = artifact.read_bytes()
        artifact.write_bytes(data[: len(data) // 3])
'''


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RepoRun:
    path = tmp_path_factory.mktemp("repo_paths")
    return run_repo(path, {"test_paths.py": TESTS, "conftest.py": CONFTEST},
                    "--compile-cache-via=local,mega",
                    f"--junitxml={path / 'junit.xml'}")


def _check(run: RepoRun, name: str, via: str) -> dict:
    [c] = [c for c in run.report["checks"] if c["nodeid"].endswith(f"::{name}") and c["via"] == via]
    return c


def test_each_path_is_a_result_of_its_own(run: RepoRun) -> None:
    assert sorted((c["nodeid"].split("::")[1], c["via"]) for c in run.report["checks"]) == [
        ("test_fused", "local"), ("test_fused", "mega"), ("test_linear", "local"),
        ("test_linear", "mega"), ("test_linear_damaged", "local"),
        ("test_linear_damaged", "mega")]
    assert "test_paths.py::test_fused [via mega]" in run.out
    assert run.ret == 1 and "2 failed, 1 passed" in run.out


def test_mega_cache_without_the_compiled_cpp_kernels_fails_naming_them(run: RepoRun) -> None:
    assert _check(run, "test_fused", "local")["verdict"] == "pass", run.out[-3000:]
    c = _check(run, "test_fused", "mega")
    assert c["verdict"] == "fail"
    kernels = c["layers"]["kernels"]
    assert kernels["state"] == "miss"
    why = kernels["reasons"][0]
    assert "rebuilt" in why and "C++ kernel object(s)" in why and ".so" in why
    assert "the mega-cache did not carry" in why and "pytorch#172542" in why
    # the artifact itself loaded: the graphs hit from it, in a root that started empty
    assert c["layers"]["fx_graph"]["state"] == "hit" and c["layers"]["aot_autograd"]["state"] == "hit"
    assert any(n.startswith("mega-cache: ") and "bytes saved" in n for n in c["notes"])
    assert c["outputs"]["warm_vs_cold"]["ok"] and c["outputs"]["warm_vs_cold"]["compared"] == 1


def test_mega_cache_that_carries_everything_passes(run: RepoRun) -> None:
    c = _check(run, "test_linear", "mega")
    assert c["verdict"] == "pass", run.out[-3000:]
    assert c["layers"]["fx_graph"]["state"] == "hit"
    assert c["outputs"]["warm_vs_cold"]["ok"] and c["outputs"]["warm_vs_eager"]["ok"]


def test_a_damaged_artifact_fails_naming_the_load(run: RepoRun) -> None:
    assert _check(run, "test_linear_damaged", "local")["verdict"] == "pass"
    c = _check(run, "test_linear_damaged", "mega")
    assert c["verdict"] == "fail"
    assert c["problems"][0].startswith("mega-cache: torch.compiler.load_cache_artifacts() "
                                       "returned None: it could not read"), c["problems"]


def test_junit_has_the_properties_of_each_path(run: RepoRun) -> None:
    import xml.etree.ElementTree as ET
    from pathlib import Path

    root = Path(run.report["rootdir"])
    cases = {tc.get("name"): {p.get("name"): p.get("value") for p in tc.iter("property")}
             for tc in ET.parse(root / "junit.xml").getroot().iter("testcase")}
    assert cases["test_fused"]["compile_cache.verdict"] == "pass"
    assert cases["test_fused"]["compile_cache.mega.verdict"] == "fail"
    assert cases["test_fused"]["compile_cache.mega.kernels"] == "miss"
