"""The preloaded interpreters start before the initial conftests load
(controller/early.py): a conftest that imports torch no longer holds their start. The
session takes them where it would have made the same launcher, and keeps them where
its environment is theirs but for the plugin's own variables; a conftest that changes
the environment has them started again, so that phases still fork as restarts."""
from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest

from conftest import run_repo
from pytest_compilecache.controller import early
from pytest_compilecache.launch.preloaded import PreloadedLauncher, _theirs_but_ours

TESTS = '''
import pytest
import torch


@pytest.mark.compile_cache
def test_linear(compile_cache):
    with torch.no_grad():
        compile_cache.record("y", torch.compile(torch.nn.Linear(8, 4))(torch.randn(4, 8)))
'''


def test_the_environment_is_theirs_but_for_the_plugins_own_variables() -> None:
    started = {"PATH": "/bin", "OMP_NUM_THREADS": "2"}
    assert _theirs_but_ours(started, {**started, "PYTEST_COMPILECACHE_PCH_DIR": "/x"})
    assert not _theirs_but_ours(started, {**started, "MALLOC_ARENA_MAX": "2"})
    assert not _theirs_but_ours(started, {**started, "OMP_NUM_THREADS": "1"})


class _State:
    def __init__(self, where: str) -> None:
        self.list_path = Path(where)


def _config(launcher: Any) -> Any:
    config = types.SimpleNamespace(stash=pytest.Stash())
    config.stash[early._EARLY] = launcher
    return config


def test_the_session_takes_the_early_launcher_only_where_it_keeps_the_same_list() -> None:
    """Another selection's list (-k, paths) would preload other libraries: the early
    interpreters are closed, the session's own start at sessionstart."""
    ran, made = PreloadedLauncher(_State("/a")), PreloadedLauncher(_State("/a"))  # type: ignore
    assert early.take(_config(ran), made) is ran and made.closed and not ran.closed
    ran, made = PreloadedLauncher(_State("/a")), PreloadedLauncher(_State("/b"))  # type: ignore
    assert early.take(_config(ran), made) is made and ran.closed and not made.closed
    assert early.take(types.SimpleNamespace(stash=pytest.Stash()), made) is made


@pytest.mark.parametrize("argv, worker, runs", [
    (["--compile-cache-check"], False, True),
    (["--compile-cache-check", "-n", "2"], False, False),  # the xdist controller: none
    (["--compile-cache-check", "-n", "2"], True, True),    # its workers run phases
    (["--compile-cache-check", "--collect-only"], False, False),
    ([], False, False),
])
def test_only_a_process_that_runs_phases_starts_them_early(
        pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch, argv: list,
        worker: bool, runs: bool) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    if worker:
        monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    ns = pytestconfig._parser.parse_known_args(argv)
    assert early._runs_phases(ns) is runs


@pytest.mark.slow
def test_a_conftest_that_imports_torch_no_longer_holds_the_interpreters_start(
        tmp_path: Path) -> None:
    run = run_repo(tmp_path / "repo", {"conftest.py": "import torch\n", "test_m.py": TESTS})
    c = run.check("test_linear")
    assert c["verdict"] == "pass", run.out[-3000:]
    timeline = run.report["timeline"]  # type: ignore[index]
    assert timeline["lane0 started"] < timeline["configure"], timeline
    assert c["launch"] == {"cold": "forked", "warm": "forked"}, c["launch"]


@pytest.mark.slow
def test_a_conftest_that_changes_the_environment_has_them_start_again(tmp_path: Path) -> None:
    """A variable C libraries read as they load, set by the conftest: interpreters that
    started without it could not fork a phase that has it (it would run fresh)."""
    conftest = "import os\n\nos.environ['MALLOC_ARENA_MAX'] = '2'\n"
    run = run_repo(tmp_path / "repo", {"conftest.py": conftest, "test_m.py": TESTS})
    c = run.check("test_linear")
    assert c["verdict"] == "pass", run.out[-3000:]
    assert c["launch"] == {"cold": "forked", "warm": "forked"}, (c["launch"], c["notes"])
