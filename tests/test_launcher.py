"""The preloaded launcher: phases forked from interpreters that imported torch and
pytest already, as fresh as a restart; a phase whose environment differs in what torch
read at import runs fresh, and says so (real CPU compiles, torch 2.13)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, Optional, Sequence

import pytest

from conftest import RepoRun, run_repo
from pytest_compilecache.launch import envspy
from pytest_compilecache.launch.lane import Lane
from pytest_compilecache.launch.libraries import installed_libraries
from pytest_compilecache.launch.preloaded import PreloadedLauncher, differs_at_import
from pytest_compilecache.launch.state import LauncherState, default_dir, finds_bytecode

TESTS = '''
import os
import sys

import pytest
import torch

from models import MLP
from pytest_compilecache import ModelCase

AT_IMPORT = "fsspec" in sys.modules


@pytest.fixture
def mlp(request):
    # inference: the subject is how phases start (training runs forked in every other
    # session), CI time
    import fsspec  # noqa: F401  the model's library, imported lazily (as transformers does)

    with open(os.environ["SEEN_FILE"], "a") as f:
        f.write(f"{request.node.name} {AT_IMPORT}\\n")
    return ModelCase(MLP(), example_inputs=(torch.randn(4, 16),))


@pytest.mark.compile_cache
def test_a_model_step(mlp):
    ...


@pytest.mark.compile_cache
def test_varying_batch(compile_cache):
    model = MLP().to(compile_cache.device).eval()
    serve = torch.compile(model)
    with torch.no_grad():
        for n in (4, 7, 9):
            serve(torch.randn(n, 16, device=compile_cache.device))


@pytest.mark.compile_cache
def test_z_env_changed_between_phases(mlp):
    ...
'''

# between the phases of the last check, the session's environment changes in a variable
# torch reads at import outside its config entries (torch.jit reads PYTORCH_JIT)
CONFTEST = '''
import os


def pytest_compilecache_between_phases(item, cache_root):
    if item.name == "test_z_env_changed_between_phases":
        os.environ["PYTORCH_JIT"] = "1"
'''


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, RepoRun]:
    files = {"test_launch.py": TESTS, "conftest.py": CONFTEST}
    # the variable changed between phases matters to the preloaded launcher alone; one
    # check of fresh interpreters is the reference (CI time)
    only = {"preloaded": (), "fresh": ("-k", "test_a_model_step")}
    runs = {}
    for launcher in ("preloaded", "fresh"):
        path = tmp_path_factory.mktemp(f"launcher_{launcher}")
        runs[launcher] = run_repo(path, files, "--compile-cache-job-id=per-check",
                                  f"--compile-cache-launcher={launcher}", *only[launcher],
                                  env={"SEEN_FILE": str(path / "seen.txt")})
    return runs


@pytest.mark.slow
def test_phases_fork_and_give_the_verdicts_of_fresh_interpreters(runs) -> None:
    pre, fresh = runs["preloaded"], runs["fresh"]
    assert pre.report["settings"]["launcher"] == "preloaded"
    for name in ("test_a_model_step", "test_varying_batch"):
        a = pre.check(name)
        assert a["launch"] == {"cold": "forked", "warm": "forked"}, pre.out[-3000:]
        assert a["verdict"] == "pass", pre.out[-3000:]
        assert a["outputs"]["warm_vs_cold"]["ok"] and a["outputs"]["warm_vs_eager"]["ok"]
        assert not [n for n in a["notes"] if "fresh interpreter" in n]
    a, b = pre.check("test_a_model_step"), fresh.check("test_a_model_step")
    assert b["launch"] == {"cold": "fresh", "warm": "fresh"}
    assert b["verdict"] == "pass", fresh.out[-3000:]
    assert {k: v["state"] for k, v in a["layers"].items()} == \
        {k: v["state"] for k, v in b["layers"].items()}


@pytest.mark.slow
def test_each_forked_phase_reads_its_own_job_id(runs) -> None:
    """torch read TORCH_COMPILE_JOB_ID when the preloaded interpreter imported it (with
    none); each phase reads its check's again: PGO hits across the restart, the check
    passes, and the report says the job id was the plugin's."""
    pre = runs["preloaded"]
    assert pre.report["settings"]["job_id"] == "per-check"
    ids = set()
    for name in ("test_a_model_step", "test_varying_batch"):
        c = pre.check(name)
        for phase in ("cold", "warm"):
            assert c["job_id"][phase]["source"] == "plugin (--compile-cache-job-id=per-check)"
            assert c["job_id"][phase]["value"].startswith("compilecache-"), c["job_id"]
            ids.add(c["job_id"][phase]["value"])
    assert len(ids) == 2, ids  # one per check, the same in both of its phases
    c = pre.check("test_varying_batch")
    assert c["verdict"] == "pass", pre.out[-3000:]
    assert c["layers"]["dynamo_pgo"]["state"] == "hit"


@pytest.mark.slow
def test_a_variable_torch_read_at_import_that_differs_runs_the_phase_fresh(runs) -> None:
    c = runs["preloaded"].check("test_z_env_changed_between_phases")
    assert c["launch"] == {"cold": "forked", "warm": "fresh"}
    assert c["verdict"] == "pass", runs["preloaded"].out[-3000:]
    assert "the warm phase ran in a fresh interpreter, not forked from a preloaded one: " \
           "PYTORCH_JIT differs from the preloaded interpreter's, and it was read at " \
           "import (jit/_state.py:" in " ".join(c["notes"]), c["notes"]


def test_what_a_fork_can_and_cannot_take_from_the_preloaded_interpreter() -> None:
    server = {"A": "1", "OMP_NUM_THREADS": "2", "TORCH_COMPILE_JOB_ID": "x"}
    reads = {"A": False, "TORCH_COMPILE_JOB_ID": True}  # True: a config entry, read again
    assert differs_at_import(server, dict(server), reads) is None
    assert differs_at_import(server, {**server, "TORCH_COMPILE_JOB_ID": "y"}, reads) is None
    assert differs_at_import(server, {**server, "NOT_READ": "1"}, reads) is None
    assert differs_at_import(server, {**server, "TMPDIR": "/elsewhere"}, reads) is None
    assert differs_at_import(server, {**server, "A": "2"}, reads, {"A": "torch/x.py:3"}) == \
        "A differs from the preloaded interpreter's, and it was read at import (torch/x.py:3)"
    assert differs_at_import(server, {k: v for k, v in server.items() if k != "A"}, reads)
    # OMP_NUM_THREADS (a rank's share of the check's threads) is set in the forked phase;
    # not a count it cannot set, another variable OpenMP reads as it loads, or one that
    # Python read at import
    assert differs_at_import(server, {**server, "OMP_NUM_THREADS": "3"}, reads) is None
    for other in ({"OMP_NUM_THREADS": "0"}, {"OMP_NUM_THREADS": "all"}, {"OMP_PROC_BIND": "1"}):
        assert "read when libraries load" in differs_at_import(server, {**server, **other}, reads)
    assert "read at import" in differs_at_import(
        server, {**server, "OMP_NUM_THREADS": "3"}, {**reads, "OMP_NUM_THREADS": False})
    # an import copied the whole environment (fsspec's config): what the plugin and
    # pytest set per phase may differ, a user's variable may not; the note says whose
    copied = [{"where": "fsspec/config.py:33", "module": "fsspec"}]
    assert differs_at_import(server, {**server, "PYTEST_CURRENT_TEST": "t (call)",
                                      "TORCHINDUCTOR_CACHE_DIR": "/check/x"}, {}, {}, copied) is None
    # the plugin's own variables too (interpreters started before configure set its dirs)
    assert differs_at_import(server, {**server, "PYTEST_COMPILECACHE_PCH_DIR": "/pch"}, {}, {},
                             copied) is None
    assert "copied the whole environment" in differs_at_import(
        server, {**server, "OMP_NUM_THREADS": "1"}, {}, {}, copied)  # settable, but copied
    assert differs_at_import(server, {**server, "NOT_READ": "1"}, {}, {}, copied) == \
        ("NOT_READ differs from the preloaded interpreter's, and importing fsspec (one of the "
         "tests' libraries) copied the whole environment (fsspec/config.py:33)")
    # the plugin's own dependency is preloaded only where the tests import it too
    assert "importing git (pytest-compilecache's own dependency, which the tests import too)" \
        in differs_at_import(server, {**server, "NOT_READ": "1"}, {}, {},
                             [{"where": "git/cmd.py:1520", "module": "git"}])


def test_an_extra_library_that_starts_a_thread_is_not_preloaded(tmp_path: Path) -> None:
    """An installed library the test modules import is preloaded too, unless importing it
    makes forking unsafe (a Python thread here; touching CUDA alike): that interpreter is
    replaced by one with torch alone, and the phase still forks."""
    (tmp_path / "threadstarter.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n")
    (tmp_path / "test_x.py").write_text(
        "import sys\n\ndef test_x():\n    assert 'threadstarter' not in sys.modules\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path[1:]])}
    launcher = _fork_one_phase(tmp_path, env, preload=["threadstarter"])
    assert launcher.dropped is not None and "2 Python threads" in launcher.dropped \
        and "threadstarter)" in launcher.dropped, launcher.dropped


def test_the_compile_stack_is_preloaded_and_each_phase_gets_its_own_precompile_dir(
        tmp_path: Path) -> None:
    """Dynamo and inductor are imported before the fork; what their import took from
    the preloaded interpreter's cache dir (the precompile cache's directory) and temp
    dir (the precompiled-header dir, torch 2.8+) is the phase's own again: a warm phase
    forked from the other interpreter than its cold one finds the cold one's headers, as
    a restart does, instead of compiling them again (7 s of a 9 s warm MLP phase)."""
    (tmp_path / "test_x.py").write_text(
        "import os, sys\n"
        "PRELOADED = 'torch._inductor.compile_fx' in sys.modules\n\n"
        "def test_x():\n"
        "    import torch._dynamo.package as p\n"
        "    import torch._inductor.codecache as cc\n"
        "    assert PRELOADED\n"
        "    assert p.DynamoCache._path_prefix == os.path.join(\n"
        "        os.environ['TORCHINDUCTOR_CACHE_DIR'], 'dynamo'), p.DynamoCache._path_prefix\n"
        "    if hasattr(cc, '_HEADER_DIR'):\n"
        "        assert cc._HEADER_DIR.startswith(os.environ['TMPDIR'] + os.sep), cc._HEADER_DIR\n"
        "        assert cc._HEADER_LOCK_DIR == os.path.join(cc._HEADER_DIR, 'locks')\n")
    (tmp_path / "phase-tmp").mkdir()
    _fork_one_phase(tmp_path, {**os.environ,
                               "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "phase-inductor"),
                               "TMPDIR": str(tmp_path / "phase-tmp")})
    assert (tmp_path / "phase-inductor").is_dir()


def test_a_phase_with_caching_precompile_on_forks_and_has_it_as_a_restart_does(
        tmp_path: Path) -> None:
    """torch._dynamo.config takes TORCH_CACHING_PRECOMPILE (2.9+) as it runs, into its
    entry's default: a phase with it on (the precompile path) forks from an interpreter
    that imported with it off, and has it on as a default, not as an override, with
    the config's values (those its hash is of) a fresh interpreter with it on has
    (every precompile phase of a session that mixes paths ran fresh)."""
    import torch._dynamo.config as config

    if "caching_precompile" not in getattr(config, "_config", {}):
        pytest.skip("this torch has no caching precompile")
    env = {k: v for k, v in os.environ.items() if k != "TORCH_CACHING_PRECOMPILE"}
    on = {**env, "TORCH_CACHING_PRECOMPILE": "1"}
    (tmp_path / "test_x.py").write_text(
        "import os, torch._dynamo, torch._inductor.compile_fx\n"
        "import torch._dynamo.config as c\n\n"
        "def test_x():\n"
        "    assert c.caching_precompile is True and c._is_default('caching_precompile')\n"
        "    d = c._get_dict(ignored_keys=list(c._compile_ignored_keys))\n"
        "    with open(os.environ['VALUES_OUT'], 'w') as f:\n"  # (a set's order is the seed's)
        "        f.write(repr(sorted((k, sorted(v) if isinstance(v, set) else v)\n"
        "                            for k, v in d.items())))\n")
    argv = ["-m", "pytest", "-p", "no:cacheprovider", "test_x.py"]
    subprocess.run([sys.executable, *argv], env={**on, "VALUES_OUT": str(tmp_path / "fresh")},
                   cwd=tmp_path, check=True, capture_output=True)
    launcher = PreloadedLauncher()
    launcher.narrow(1)  # one phase: one interpreter
    launcher.start(env, str(tmp_path))  # the interpreter imports with it off
    try:
        got = launcher.run(argv, {**on, "VALUES_OUT": str(tmp_path / "forked")},
                           str(tmp_path), tmp_path / "x.log", 300)
    finally:
        launcher.close()
    assert got.forked and got.fresh_because is None, got
    assert got.returncode == 0, (tmp_path / "x.log").read_text()
    assert (tmp_path / "forked").read_text() == (tmp_path / "fresh").read_text()


def test_a_config_value_set_under_torch_marks_what_it_computed_as_torch_does() -> None:
    """Torch keeps a config module's hash and dicts computed; setting a value marks them
    stale: a dirty flag up to torch 2.12 (every phase on the GPU machine's 2.11 ran fresh
    while only the context variable of 2.13+ was known), a context variable since."""
    import contextvars
    import types

    old = types.SimpleNamespace(_is_dirty=False)
    assert envspy._values_changed(old, "caching_precompile") and old._is_dirty is True
    marked: list = []
    new = types.SimpleNamespace(_hash_dirty_var=contextvars.ContextVar("d", default=False),
                                _mark_get_dict_dirty=marked.append)
    assert envspy._values_changed(new, "caching_precompile")
    assert new._hash_dirty_var.get() is True and marked == ["caching_precompile"]
    assert not envspy._values_changed(types.SimpleNamespace(), "caching_precompile")


def test_the_preloaded_import_keeps_the_value_a_capture_took(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A module run as torch._dynamo.config is (its file's name and the module's own
    code) that reads TORCH_CACHING_PRECOMPILE: the capture is known, and the value it
    took is kept for the phases."""
    from pytest_compilecache.launch import forkserver

    pkg = tmp_path / "fakedynamo" / "_dynamo"
    pkg.mkdir(parents=True)
    (pkg.parent / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "config.py").write_text(
        "import os\nswitch = os.environ.get('TORCH_CACHING_PRECOMPILE', '0') == '1'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("TORCH_CACHING_PRECOMPILE", "0")
    preloaded = forkserver.Preloaded()
    preloaded._watching(lambda: __import__("fakedynamo._dynamo.config"))
    assert "_redo_caching_precompile" in preloaded.redo
    assert preloaded.captured == {"_redo_caching_precompile": "0"}


def test_a_capture_that_cannot_be_redone_forks_a_phase_with_the_value_it_took(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What an import captured from a variable is redone in a phase only where the
    phase's value differs: a torch whose config this cannot redo still forks the phases
    that leave the variable as the preloaded import saw it, and vetoes the others."""
    from pytest_compilecache.launch import forkserver

    monkeypatch.setitem(forkserver.REDO_BY_NAME, "_redo_caching_precompile", lambda: False)
    preloaded = forkserver.Preloaded()
    preloaded.redo, preloaded.captured = ["_redo_caching_precompile"], {
        "_redo_caching_precompile": None}
    monkeypatch.delenv("TORCH_CACHING_PRECOMPILE", raising=False)
    assert preloaded.phase_problem() is None
    monkeypatch.setenv("TORCH_CACHING_PRECOMPILE", "1")
    assert preloaded.phase_problem() == (
        "cannot redo what torch's import captured (_redo_caching_precompile)")


def test_the_last_sessions_libraries_are_preloaded_at_start_and_bytecode_kept_aside(
        tmp_path: Path) -> None:
    """A session keeps what its interpreters preloaded; the next one's import it as they
    start, before anything is collected. Where Python writes no bytecode and finds none of
    torch's where it looks (here: a pycache prefix of its own, empty), the preloaded
    interpreters keep theirs in the launcher's dir, and a phase gets the interpreter's own
    settings back (it compiles as a restart does)."""
    state = LauncherState(tmp_path / "state", str(tmp_path))
    own = tmp_path / "own-prefix"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": str(own)}
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    _fork_one_phase(tmp_path, env, preload=["fsspec"], state=state)
    assert "fsspec" in state.preloads()
    assert list((tmp_path / "state" / "bytecode").rglob("torch/__init__.*.pyc"))
    (tmp_path / "test_x.py").write_text(
        "import sys\n"
        "AT_IMPORT = 'fsspec' in sys.modules\n\n"
        "def test_x():\n"
        "    assert AT_IMPORT\n"
        f"    assert sys.pycache_prefix == {str(own)!r} and sys.dont_write_bytecode\n")
    launcher = _fork_one_phase(tmp_path, env, state=state)
    assert launcher.needed == [] and "fsspec" in state.preloads()  # kept while it imports
    off = LauncherState.chosen("none", str(tmp_path))
    assert off is None and LauncherState.chosen(None, str(tmp_path)).path == default_dir()


def test_bytecode_installed_with_torch_is_read_where_it_is(tmp_path: Path) -> None:
    """pip compiles bytecode at install, whatever PYTHONDONTWRITEBYTECODE says: the
    preloaded interpreters read torch's where it is, and keep none in the launcher's dir
    (a prefix would hide it: every session with an empty dir compiled torch again)."""
    from pytest_compilecache.launch.forkserver import COMPILE_STACK

    if os.environ.get("PYTHONPYCACHEPREFIX") or not finds_bytecode(["torch", *COMPILE_STACK]):
        pytest.skip("this torch's bytecode is not where the interpreter looks")
    state = LauncherState(tmp_path / "state", str(tmp_path))
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    (tmp_path / "test_x.py").write_text(
        "import sys\n\n"
        "def test_x():\n"
        "    assert sys.pycache_prefix is None and sys.dont_write_bytecode\n")
    _fork_one_phase(tmp_path, env, state=state)
    assert not list((tmp_path / "state" / "bytecode").rglob("*.pyc"))


def test_finds_bytecode_looks_where_the_interpreter_looks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A package counts as shipping its bytecode only where this interpreter, as set,
    finds that of each module asked (an image that imported the package once at build
    time has it for some only), without importing it."""
    import py_compile

    monkeypatch.setattr(sys, "pycache_prefix", None)  # before compiling: where it writes
    pkg = tmp_path / "shipped_pkg"
    (pkg / "sub").mkdir(parents=True)
    for source in (pkg / "__init__.py", pkg / "sub" / "__init__.py", pkg / "mod.py",
                   pkg / "bare.py"):
        source.write_text("X = 1\n")
        if source.name != "bare.py":
            py_compile.compile(str(source), doraise=True)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert finds_bytecode(["shipped_pkg", "shipped_pkg.sub", "shipped_pkg.mod"])
    assert not finds_bytecode(["shipped_pkg", "shipped_pkg.bare"])
    assert not finds_bytecode(["no_such_package_here"])
    assert "shipped_pkg" not in sys.modules
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path / "elsewhere"))
    assert not finds_bytecode(["shipped_pkg"])


def _fork_one_phase(tmp_path: Path, env: Dict[str, str], preload: Sequence[str] = (),
                    state: Optional[LauncherState] = None) -> PreloadedLauncher:
    """`pytest test_x.py` in `tmp_path` as one phase of a preloaded launcher (closed
    after), which must fork it and see it pass."""
    launcher = PreloadedLauncher(state)
    launcher.narrow(1)  # one phase: a second interpreter would import torch for nothing
    launcher.preload(preload)
    try:
        got = launcher.run(["-m", "pytest", "-p", "no:cacheprovider", "test_x.py"], env,
                           str(tmp_path), tmp_path / "x.log", 300)
        assert list(launcher._lanes) == [0]  # one interpreter imported torch
    finally:
        launcher.close()
    assert got.forked and got.fresh_because is None, got
    assert got.returncode == 0, (tmp_path / "x.log").read_text()
    return launcher


def test_a_narrowed_launcher_starts_a_lane_a_phase_asks_for_after_all(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A recording's session starts one interpreter (narrow: its checks have one phase
    each); a phase that asks for another lane all the same has it started then, where it
    would fail on a lane that is not there."""
    from pytest_compilecache.launch import preloaded

    started = []

    class Started:
        def __init__(self, env: Dict[str, str], cwd: str, home: Path, i: int, *args: object,
                     **kwargs: object) -> None:
            started.append(i)
            self.env, self.proc = env, None

        def ready(self) -> Dict[str, str]:
            return {"problem": "no interpreter in this test"}

    monkeypatch.setattr(preloaded, "Lane", Started)
    launcher = PreloadedLauncher()
    launcher.narrow(1)
    launcher.start(dict(os.environ), str(tmp_path))
    try:
        assert started == [0]
        assert launcher._why_fresh(["-m", "pytest"], os.environ, str(tmp_path), 1) \
            == "no interpreter in this test"
        assert started == [0, 1]
    finally:
        shutil.rmtree(launcher._home or tmp_path / "none", ignore_errors=True)


def test_installed_libraries_are_those_of_site_packages(tmp_path: Path) -> None:
    import types

    import torch

    mine = types.ModuleType("models")
    mine.__file__ = str(tmp_path / "models.py")
    assert installed_libraries({"torch": torch, "models": mine, "torch.nn": torch.nn}) == ["torch"]


@pytest.mark.slow
def test_a_library_the_cold_phase_imported_lazily_is_preloaded_for_the_warm_one(
        runs: Dict[str, RepoRun]) -> None:
    """fsspec (a torch dependency that nothing preloads) is imported by the fixture only:
    the cold phase says so, and the other preloaded interpreter imports it while the cold
    phase still runs; the verdict is the same. (The session's first check, as it was
    alone in a session of its own: CI time.)"""
    pre = runs["preloaded"]
    c = pre.check("test_a_model_step")
    assert c["verdict"] == "pass" and c["launch"] == {"cold": "forked", "warm": "forked"}, \
        pre.out[-3000:]
    seen = (pre.path / "seen.txt").read_text().splitlines()
    assert [s.split()[1] for s in seen if s.startswith("test_a_model_step ")] == \
        ["False", "True"], seen


def test_after_the_workload_compile_workers_get_the_lowest_cpu_priority() -> None:
    """A process two levels below (a pool's sidecar and its worker) is reniced, this
    process is not; nothing is stopped."""
    import subprocess

    from pytest_compilecache.lifetime import deprioritize_descendants

    sidecar = subprocess.Popen([sys.executable, "-c",
                                "import subprocess, sys, time\n"
                                "w = subprocess.Popen(['sleep', '30'])\n"
                                "print(w.pid, flush=True)\n"
                                "time.sleep(30)\n"], stdout=subprocess.PIPE, text=True)
    worker = int(sidecar.stdout.readline())  # type: ignore[union-attr]
    try:
        assert deprioritize_descendants() >= 2
        assert os.getpriority(os.PRIO_PROCESS, sidecar.pid) == 19
        assert os.getpriority(os.PRIO_PROCESS, worker) == 19
        assert os.getpriority(os.PRIO_PROCESS, os.getpid()) != 19
        assert sidecar.poll() is None
    finally:
        os.kill(worker, 9)
        sidecar.kill()
        sidecar.wait()


def test_a_whole_copy_of_the_environment_is_recorded_once_with_where() -> None:
    """dict(os.environ) and os.environ.copy() at import are copies of everything: one
    record (then `differs_at_import` lets only per-phase variables differ), not a read of
    each variable; a read by name is still a read."""
    from pytest_compilecache.launch.envspy import EnvSpy as _EnvSpy

    spy = _EnvSpy({"A": "1", "B": "2"})
    assert dict(spy) == {"A": "1", "B": "2"} and spy.copy() == {"A": "1", "B": "2"}
    assert len(spy.copies) == 1 and spy.copies[0]["where"].startswith("tests/test_launcher.py:")
    assert spy.copies[0]["module"] == "test_launcher"
    assert spy.reads == {}
    spy.get("A")
    assert spy.reads == {"A": False}


def test_an_error_tail_keeps_the_users_traceback_not_torchs_debug_lines_or_pytests_footer():
    from pytest_compilecache.launch.launcher import useful_tail

    log = "\n".join([
        "V1124 14:20:44.123000 1234 torch/_dynamo/guards.py:2345] [0/0] [__guards] GUARDS:",
        "    def forward(self, x):",
        ">       raise ValueError('bad shape in my model')",
        "E       ValueError: bad shape in my model",
        "I1124 14:20:45.000000 1234 torch/_inductor/codecache.py:99] fx graph cache miss",
        "W1124 14:20:45.100000 1234 torch/_dynamo/convert_frame.py:1] a warning stays",
        "=========================== short test summary info ============================",
        "FAILED test_m.py::test_model - ValueError: bad shape in my model",
        "============================== 1 failed in 3.21s ===============================",
    ])
    tail = useful_tail(log)
    assert "E       ValueError: bad shape in my model" in tail
    assert "a warning stays" in tail
    assert "GUARDS" not in tail and "fx graph cache miss" not in tail
    assert "short test summary" not in tail and "1 failed in" not in tail


def test_an_error_tail_drops_pytests_capture_of_the_plugins_trace_observation():
    """A cold phase whose body asserted after a compiled call (tests/test_messages.py
    runs it for real): its log, as pytest wrote it, ended in the plugin's trace events
    captured as log records; the tail shown is the test's failure."""
    from pytest_compilecache.launch.launcher import useful_tail

    log = "\n".join([
        "    def test_fails_cold(compile_cache):",
        "        x = torch.randn(8)",
        "        y = torch.compile(f)(x)",
        ">       assert y.sum() > 1e9, \"the test's own assert\"",
        "E       AssertionError: the test's own assert",
        "",
        "test_msg.py:13: AssertionError",
        "------------------------------ Captured log call -------------------------------",
        *["DEBUG    torch.__trace:utils.py:2350 "] * 60,
        "DEBUG    torch.__trace:guards.py:4552 ",
        "INFO     torch.__trace:compile_fx.py:1149 ",
        "=============================== warnings summary ===============================",
        "=========================== short test summary info ============================",
        "FAILED test_msg.py::test_fails_cold - AssertionError: the test's own assert",
    ])
    tail = useful_tail(log)
    assert "torch.__trace" not in tail and "Captured log call" not in tail
    assert tail.splitlines()[-1] == "test_msg.py:13: AssertionError"
    assert "E       AssertionError: the test's own assert" in tail
    # the user's own log records stay, under their header
    mine = useful_tail("------------------------------ Captured log call ---------------\n"
                       "DEBUG    torch.__trace:utils.py:2350 \n"
                       "WARNING  my_service:app.py:12 cache dir not writable")
    assert mine.splitlines() == ["------------------------------ Captured log call ---------------",
                                 "WARNING  my_service:app.py:12 cache dir not writable"]


def test_a_crash_after_pytests_footer_stays_in_the_tail():
    from pytest_compilecache.launch.launcher import useful_tail

    log = "\n".join(["test_m.py .", "=========================== warnings summary ==========",
                     "UserWarning: x", "Fatal Python error: Segmentation fault",
                     "Current thread 0x1 (most recent call first):", '  File "teardown.py"'])
    assert "Fatal Python error: Segmentation fault" in useful_tail(log)


def test_a_launcher_state_others_could_write_is_neither_read_nor_written(tmp_path):
    """Its bytecode is code and its list names imports: a directory open to other users
    (or under one they could swap) is ignored, and the launcher goes on without it."""
    state = LauncherState(tmp_path / "state", str(tmp_path))
    state.keep_preloads(["fsspec"])
    assert state.trusted() and state.preloads() == ["fsspec"]
    assert state.bytecode_dir() is not None and (tmp_path / "state").stat().st_mode & 0o777 == 0o700
    (tmp_path / "state").chmod(0o777)
    assert not state.trusted() and state.preloads() == [] and state.bytecode_dir() is None
    state.keep_preloads(["json"])
    (tmp_path / "state").chmod(0o700)
    assert state.preloads() == ["fsspec"]  # nothing written while it was open
    (tmp_path / "state").chmod(0o700)
    tmp_path.chmod(0o777)  # a parent anyone may write, without the sticky bit
    try:
        assert not state.trusted() and state.preloads() == []
    finally:
        tmp_path.chmod(0o700)
    # bytecode/ as a link out of the state: not used
    shutil.rmtree(tmp_path / "state" / "bytecode")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "state" / "bytecode").symlink_to(tmp_path / "elsewhere")
    assert state.trusted() and state.bytecode_dir() is None


def test_each_selection_keeps_its_own_preload_list(tmp_path):
    """A session's first fork waits for what its interpreters preload: the list kept by
    a session of another selection (`-k bert` before `-k resnet`) would have it wait for
    a library its tests never import. Kept per paths, -k and -m."""
    from types import SimpleNamespace

    from pytest_compilecache.controller.start import launcher_for

    def state(args, keyword, here=tmp_path):
        config = SimpleNamespace(args=args, rootpath=tmp_path,
                                 invocation_params=SimpleNamespace(dir=here),
                                 option=SimpleNamespace(keyword=keyword, markexpr=""))
        settings = SimpleNamespace(launcher="preloaded",
                                   launcher_state=str(tmp_path / "state"))
        return launcher_for(config, settings).state

    state(["test_models.py"], "resnet").keep_preloads(["torchvision"])
    state(["test_models.py"], "bert").keep_preloads(["transformers"])
    assert state(["test_models.py"], "resnet").preloads() == ["torchvision"]
    assert state(["test_models.py"], "bert").preloads() == ["transformers"]
    assert state(["test_models.py", "test_more.py"], "resnet").preloads() == []
    # one selection however its paths are typed, from wherever the command ran
    (tmp_path / "sub").mkdir()
    assert state(["./test_models.py"], "resnet").preloads() == ["torchvision"]
    assert state(["../test_models.py"], "resnet", tmp_path / "sub").preloads() == ["torchvision"]
    assert LauncherState(tmp_path / "state", str(tmp_path)).preloads() == []


def _lane_saying(tmp_path: Path, script: str, pending: int = 0) -> Lane:
    """A Lane over a process that writes `script`'s hellos (the protocol's lines), without
    a forkserver's imports: what the controller reads, on a real pipe."""
    lane = Lane.__new__(Lane)
    lane.proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, start_new_session=True)  # as a lane
    lane.fd, lane._unread = lane.proc.stdout.fileno(), b""
    lane.hello, lane.pending, lane.gone = None, pending, False
    lane.lock, lane.fd_lock = threading.RLock(), threading.Lock()
    return lane


def test_two_hellos_written_together_are_both_read(tmp_path: Path) -> None:
    """The imports' hello and a preload's, written together while the controller was
    collecting: a buffered readline took both and kept the second where select could
    not see it (the lane then looked busy until its start timeout)."""
    write = ("import sys, time; sys.stdout.write({!r}); sys.stdout.flush(); "
             "time.sleep(30)")
    lane = _lane_saying(tmp_path, write.format('{"imports": 1}\n{"preload": 1}\n'), pending=1)
    time.sleep(1.0)  # both lines wait in the pipe
    try:
        assert lane.step(time.perf_counter() + 5) and not lane.settled()
        t0 = time.perf_counter()
        assert lane.step(time.perf_counter() + 5) and lane.settled()
        assert time.perf_counter() - t0 < 1 and lane.hello == {"preload": 1}
    finally:
        lane.proc.kill()
        lane.proc.wait()
        lane.proc.stdout.close()
        lane.proc.stdin.close()


def test_a_lane_closed_while_a_phase_waits_on_it_ends_the_wait(tmp_path: Path) -> None:
    """The session closes its lanes (an interrupt, a stop) while a phase's thread still
    waits for its exit status: the wait ends, None, and the closed descriptor (whose
    number another file may take) is never read."""
    lane = _lane_saying(tmp_path, "import time; time.sleep(60)")
    got: list = []
    waiting = threading.Thread(target=lambda: got.append(
        lane.receive(time.perf_counter() + 30)))
    waiting.start()
    time.sleep(0.3)
    t0 = time.perf_counter()
    lane.close()
    waiting.join(10)
    assert not waiting.is_alive() and got == [None] and lane.gone
    assert time.perf_counter() - t0 < 3
    lane.proc.stdin.close()


def test_a_lane_busy_with_a_preload_is_closed_without_a_wait(tmp_path: Path) -> None:
    """At a session's end a lane is often still importing what the last phase asked it
    to preload: it is killed at once, not given a second to notice its closed stdin."""
    lane = _lane_saying(tmp_path, "import time; time.sleep(60)")  # importing, as it were
    t0 = time.perf_counter()
    lane.close()
    assert time.perf_counter() - t0 < 0.5 and lane.proc.returncode is not None
    lane.proc.stdin.close()


def test_a_message_written_before_the_lane_closed_is_still_read(tmp_path: Path) -> None:
    """A phase's exit status written just before the session closed the lane: read, not
    taken for a dead interpreter (which would send every later phase fresh)."""
    lane = _lane_saying(tmp_path, 'import sys, time; sys.stdout.write("{\\"status\\": 0}\\n"); '
                                  'sys.stdout.flush(); time.sleep(30)')
    time.sleep(1.0)
    lane.gone = True  # as close() marks it first
    try:
        assert lane.receive(time.perf_counter() + 5) == {"status": 0}
        assert lane.receive(time.perf_counter() + 5) is None
    finally:
        lane.close()
        lane.proc.stdin.close()


def test_an_interpreter_started_from_a_rank_thread_outlives_the_thread(tmp_path: Path) -> None:
    """A rank's thread ends with its phase; an interpreter it started (a bare lane in
    place of one whose preload made forking unsafe) was told of that end and died."""
    from pytest_compilecache.launch.lane import STARTER
    from pytest_compilecache.lifetime import child_preexec

    started: list = []

    def rank() -> None:
        started.append(STARTER.call(lambda: subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(30)"],
            start_new_session=True, preexec_fn=child_preexec)))

    thread = threading.Thread(target=rank)
    thread.start()
    thread.join()
    time.sleep(1.0)
    try:
        assert started[0].poll() is None
    finally:
        started[0].kill()
        started[0].wait()
