"""What a check says, read as its user reads it: a cache the test's own code switched
off fails naming the setting, where it was set and the fix (a service running that code
never starts warm); a phase that failed shows the test's own failure as its last lines
of output, not the plugin's capture of torch's trace. One session, real CPU compiles."""
from __future__ import annotations

import pytest

from conftest import RepoRun, run_repo

pytestmark = pytest.mark.slow

TESTS = '''
import pytest
import torch


def scale(x):
    return torch.sin(x) * 2 + 1


@pytest.mark.compile_cache
def test_fx_cache_off_in_code(compile_cache):
    torch._inductor.config.fx_graph_cache = False  # as a service might, by accident
    compile_cache.record("y", torch.compile(scale)(torch.randn(8)))


@pytest.mark.compile_cache
def test_fails_in_cold(compile_cache):
    y = torch.compile(scale, backend="eager")(torch.randn(8))  # traced: trace events
    assert y.sum() > 1e9, "the test's own assert"
'''


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RepoRun:
    return run_repo(tmp_path_factory.mktemp("repo_messages"), {"test_messages_repo.py": TESTS})


def test_a_cache_switched_off_in_the_tests_code_fails_naming_the_setting(run: RepoRun) -> None:
    c = run.check("test_fx_cache_off_in_code")
    setting = "torch._inductor.config.fx_graph_cache = False"
    assert c["verdict"] == "fail", run.out[-4000:]
    fx, aot = c["layers"]["fx_graph"], c["layers"]["aot_autograd"]
    assert (fx["state"], fx["setting"]) == ("off", setting)
    assert c["problems"] == [f"fx_graph: off - {fx['reasons'][0]}"]
    assert fx["reasons"][0].startswith(f"{setting}, set in the test's code during the phase: "
                                       f"a service with that setting never starts warm")
    assert fx["reasons"][0].endswith("remove it, or set it True")
    # AOTAutograd's own switch is on: the FX cache's is named, not its own
    assert aot["state"] == "off" and aot["reasons"][0].startswith(
        f"off because the FX graph cache is off ({setting}, set in the test's code")
    assert f"  - fx_graph: {setting}, set in the test's code during the phase" in run.out
    assert "TORCHINDUCTOR_AUTOGRAD_CACHE" not in run.out


def test_a_failed_phase_shows_the_tests_failure_not_the_trace_capture(run: RepoRun) -> None:
    c = run.check("test_fails_in_cold")
    assert c["verdict"] == "error", run.out[-4000:]
    tail = run.out.split("--- last lines of its output ---\n")[1].split("\n  compile+run:")[0]
    assert "torch.__trace" not in run.out and "Captured log call" not in tail, tail
    assert "E       AssertionError: the test's own assert" in tail, tail
