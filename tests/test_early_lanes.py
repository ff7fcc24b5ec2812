"""The preloaded interpreters start before the initial conftests load
(controller/early.py): a conftest that imports torch no longer holds their start. The
session takes them where it would have made the same launcher, and keeps them where
its environment is theirs but for the plugin's own variables; a conftest that changes
the environment has them started again, so that phases still fork as restarts."""
from __future__ import annotations

import os
import types
from pathlib import Path
from typing import Any

import pytest

from conftest import run_repo
from pytest_compilecache.controller import early
from pytest_compilecache.launch.preloaded import PreloadedLauncher, _theirs_but_ours



def test_the_environment_is_theirs_but_for_the_plugins_own_variables() -> None:
    started = {"PATH": "/bin", "OMP_NUM_THREADS": "2"}
    assert _theirs_but_ours(started, {**started, "PYTEST_COMPILECACHE_PCH_DIR": "/x"})
    assert not _theirs_but_ours(started, {**started, "MALLOC_ARENA_MAX": "2"})
    assert not _theirs_but_ours(started, {**started, "OMP_NUM_THREADS": "1"})


class _State:
    def __init__(self, where: str) -> None:
        self.list_path = Path(where)


def _config(launcher: Any = None, numprocesses: Any = None) -> Any:
    """A plain controller's config (an xdist controller's with `numprocesses`)."""
    config = types.SimpleNamespace(stash=pytest.Stash(),
                                   option=types.SimpleNamespace(numprocesses=numprocesses))
    if launcher is not None:
        config.stash[early._EARLY] = (launcher, None)
    return config


def test_the_session_takes_the_early_launcher_only_where_it_keeps_the_same_list() -> None:
    """Another selection's list (-k, paths) would preload other libraries: the early
    interpreters are closed, the session's own start at sessionstart."""
    ran, made = PreloadedLauncher(_State("/a")), PreloadedLauncher(_State("/a"))  # type: ignore
    assert early.take(_config(ran), made) is ran and made.closed and not ran.closed
    ran, made = PreloadedLauncher(_State("/a")), PreloadedLauncher(_State("/b"))  # type: ignore
    assert early.take(_config(ran), made) is made and ran.closed and not made.closed
    assert early.take(_config(), made) is made
    # an xdist controller runs no phase (a worker id it inherited started them)
    ran, made = PreloadedLauncher(_State("/a")), PreloadedLauncher(_State("/a"))  # type: ignore
    assert early.take(_config(ran, numprocesses=2), made) is made and ran.closed


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
    if "-n" in argv and not pytestconfig.pluginmanager.hasplugin("xdist"):
        pytest.skip("-n is xdist's option")
    ns = pytestconfig._parser.parse_known_args(argv)
    assert early._runs_phases(ns, worker) is runs


def test_a_worker_id_inherited_by_pytests_own_command_is_no_worker(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An xdist controller started by a worker's test (`pytest -n 2` in a subprocess)
    inherits PYTEST_XDIST_WORKER; it is pytest's command, not execnet's interpreter."""
    import sys

    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    main = types.ModuleType("__main__")
    main.__spec__ = types.SimpleNamespace(name="pytest.__main__")  # type: ignore[assignment]
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr(sys, "argv", ["pytest", "-n", "2", "--compile-cache-check"])
    assert not early._is_worker(["-n", "2", "--compile-cache-check"])
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))  # execnet's
    assert early._is_worker(["-n", "2", "--compile-cache-check"])
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert not early._is_worker(["-n", "2", "--compile-cache-check"])


MARKED = '''
import os

import pytest
import torch


@pytest.mark.compile_cache
def test_linear(compile_cache):
    # forked from an interpreter that the session's watchdog finds by its mark
    with open(f"/proc/{os.getppid()}/environ", "rb") as f:
        assert b"PYTEST_COMPILECACHE_SESSION=" in f.read()
    with torch.no_grad():
        compile_cache.record("y", torch.compile(torch.nn.Linear(8, 4))(torch.randn(4, 8)))
'''

ONE_CPU = '''
import os

import pytest
import torch


@pytest.mark.compile_cache
def test_linear(compile_cache):
    # the interpreter it forked from imported torch (whose inductor counts its compile
    # threads from the affinity) on the CPUs a restart would have
    assert os.sched_getaffinity(os.getppid()) == os.sched_getaffinity(0)
    with torch.no_grad():
        compile_cache.record("y", torch.compile(torch.nn.Linear(8, 4))(torch.randn(4, 8)))
'''


@pytest.mark.slow
def test_a_conftest_that_imports_torch_no_longer_holds_the_interpreters_start(
        tmp_path: Path) -> None:
    run = run_repo(tmp_path / "repo", {"conftest.py": "import torch\n", "test_m.py": MARKED})
    c = run.check("test_linear")
    assert c["verdict"] == "pass", run.out[-3000:]
    timeline = run.report["timeline"]  # type: ignore[index]
    assert timeline["lane0 started"] < timeline["configure"], timeline
    assert c["launch"] == {"cold": "forked", "warm": "forked"}, c["launch"]


@pytest.mark.slow
def test_a_conftest_that_changes_the_process_has_them_start_again(tmp_path: Path) -> None:
    """A variable C libraries read as they load, and the CPU affinity (inductor counts
    its compile threads from it at import), set by the conftest: interpreters that
    started without them would fork phases unlike a restart."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: an affinity of one changes nothing")
    conftest = ("import os\n\nos.environ['MALLOC_ARENA_MAX'] = '2'\n"
                "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n")
    run = run_repo(tmp_path / "repo", {"conftest.py": conftest, "test_m.py": ONE_CPU})
    c = run.check("test_linear")
    assert c["verdict"] == "pass", run.out[-3000:]
    assert c["launch"] == {"cold": "forked", "warm": "forked"}, (c["launch"], c["notes"])
