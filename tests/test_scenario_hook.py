"""A third party adds a scenario through the `pytest_compilecache_scenarios` hook, with
no edit of this package: a toy scenario in the model repo's conftest.py brings its own
switch (`--compile-cache-toy-restart`, listed in --help), its own usage error, and runs
the path it names (a toy path the same conftest registers) alone in the session. Real
CPU compiles for the check; the switch's help and usage error compile nothing."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import run_repo
from test_path_hook import TESTS

CONFTEST = '''
from pytest_compilecache.paths.local import LocalRestart
from pytest_compilecache.scenarios.base import Scenario


class ToyPath(LocalRestart):
    """The local restart, under a name of its own: only the toy scenario runs it."""
    name = via = "toy"
    selectable = False


class ToyRestart(Scenario):
    name = "toy"
    switch = "toy-restart"
    help = "restart the toy way (a toy scenario)"

    def usage_error(self, on, values):
        if values.get("repeat"):
            return "--compile-cache-toy-restart: drop --compile-cache-repeat"
        return None


def pytest_compilecache_warm_start_paths():
    return [ToyPath]


def pytest_compilecache_scenarios():
    return [ToyRestart]
'''


def test_a_scenario_registered_through_the_hook_has_its_switch_and_its_usage_error(
        tmp_path: Path) -> None:
    run = run_repo(tmp_path / "repo", {"conftest.py": CONFTEST, "test_toy.py": TESTS},
                   "--compile-cache-toy-restart", "--compile-cache-repeat")
    assert run.ret == pytest.ExitCode.USAGE_ERROR, run.out[-2000:]
    assert "--compile-cache-toy-restart: drop --compile-cache-repeat" in run.out
    run = run_repo(tmp_path / "repo", {"conftest.py": CONFTEST, "test_toy.py": TESTS},
                   "--help")
    flat = " ".join(run.out.split())
    assert "--compile-cache-toy-restart restart the toy way (a toy scenario)" in flat
    assert "compile_cache_toy_restart (bool)" in flat


@pytest.mark.slow
def test_a_scenario_registered_through_the_hook_runs_its_path_alone(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    files = {"conftest.py": CONFTEST, "test_toy.py": TESTS}
    run = run_repo(repo, {**files, "pytest.ini": "[pytest]\ncompile_cache_toy_restart = true\n"})
    assert run.ret == 0, run.out[-3000:]
    assert [(c["via"], c["verdict"]) for c in run.report["checks"]] == [("toy", "pass")]


def test_a_scenario_the_hook_gets_wrong_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    bad = "class NotAScenario:\n    name = 'x'\n\n\ndef pytest_compilecache_scenarios():\n" \
          "    return [NotAScenario]\n"
    run = run_repo(tmp_path / "repo", {"conftest.py": bad, "test_toy.py": TESTS})
    assert run.ret == pytest.ExitCode.USAGE_ERROR, run.out[-2000:]
    assert "returned conftest.NotAScenario, which is not a subclass of " \
           "pytest_compilecache.scenarios.base.Scenario" in run.out
