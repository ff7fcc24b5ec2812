"""The forked child of a preloaded interpreter (forkserver.py) becoming `python -m
pytest ARGS`: the phase's log, cwd and environment in place of the interpreter's; what
the imports read from the old environment read again from the new (a torch config
entry's default, replayed); its CPU threads (OMP_NUM_THREADS, which OpenMP read as
libraries loaded: a rank's share of the check's threads, controller/fleet.threads_env,
set as torch sets it from the variable at start, `set_threads`); sys.path rebuilt for its
cwd; or a veto (the launcher then starts it fresh). No pytest until the phase starts;
torch only in the child.
"""
from __future__ import annotations

import os
import signal
import sys
import traceback
from typing import Any, Dict, List, Optional, Tuple

from pytest_compilecache.isolation import IMPORTS_OUT_ENV
from pytest_compilecache.launch.libraries import shadowed
from pytest_compilecache.lifetime import (LAUNCHER_PID_ENV, PHASE_ENV, name_process,
                                         parent_death_signal)

# a phase that a fork cannot start as a fresh interpreter would exits with this status
# and says why on a line of its log; the launcher then starts it fresh
VETO, VETO_STATUS = "pytest-compilecache: no fork", 75
THREADS_ENV = "OMP_NUM_THREADS"


def threads_of(value: Optional[str]) -> Optional[int]:
    """OMP_NUM_THREADS as a count a forked phase can set, else None."""
    return int(value) if value and value.isdigit() and int(value) > 0 else None


def set_threads(n: Optional[int]) -> None:
    """torch's intra-op threads, as a fresh interpreter with OMP_NUM_THREADS=n has them
    (`torch.get_num_threads()`, which Inductor's CPU kernels and keys read); torch's own
    threads started later take it up (`at::init_num_threads`). No pool has started here:
    a preloaded interpreter runs no parallel work before it forks (`fork_problem`). Not
    OpenMP's default for threads torch did not start (a test's own thread calling
    OpenMP directly sees the interpreter's count): so a fleet's interpreters start with
    their ranks' threads (controller/fleet.py `_widen`), and this is for the phase whose
    interpreter was started for another share (two fleets of other sizes in a session)."""
    if n is not None:
        import torch

        torch.set_num_threads(n)


def become_phase(req: Dict[str, Any], state: Any, base_path: List[str],
                 own_pythonpath: List[str], problem: Optional[str] = None) -> None:
    """In the forked child: become `python -m pytest ARGS` started in `cwd` with `env`."""
    code = 70
    try:
        server = os.getppid()
        os.setsid()
        parent_death_signal(signal.SIGKILL)  # whatever the test body does with SIGTERM
        if os.getppid() != server:
            os._exit(code)
        _take_phase(req, state, server)
        path, veto = _phase_sys_path(req["env"], state, base_path, own_pythonpath)
        veto = problem or veto
        if veto:
            print(f"{VETO}: {veto}", flush=True)
            os._exit(VETO_STATUS)
        sys.path[:] = path
        signal.signal(signal.SIGINT, signal.default_int_handler)
        import runpy

        import pytest

        sys.argv = [os.path.join(os.path.dirname(pytest.__file__), "__main__.py"),
                    *req["argv"][2:]]
        # what `python -m pytest` runs, whatever pytest's version (it raises SystemExit)
        runpy.run_module("pytest", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        _exit_after_atexit(code)


def _take_phase(req: Dict[str, Any], state: Any, server: int) -> None:
    """The phase's log, cwd and environment in place of this interpreter's, and what
    the imports read from the old environment read again from the new."""
    # appended to: the launcher cuts a log that grows too long (phaselog.py)
    fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o666)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.chdir(req["cwd"])
    env: Dict[str, str] = req["env"]
    before = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    os.environ[LAUNCHER_PID_ENV] = str(server)
    os.environ[IMPORTS_OUT_ENV] = req["log"] + ".imports"
    if env.get(PHASE_ENV):
        name_process(env[PHASE_ENV])
    state.own_bytecode()
    changed = {k for k in set(before) | set(env) if before.get(k) != env.get(k)}
    for keys, (entry, args) in state.entries.values():
        if changed.intersection(keys):
            type(entry).__init__(entry, *args)
    if THREADS_ENV in changed:
        set_threads(threads_of(env.get(THREADS_ENV)))
    import tempfile

    tempfile.tempdir = None


def _phase_sys_path(env: Dict[str, str], state: Any, base_path: List[str],
                    own_pythonpath: List[str]) -> Tuple[List[str], Optional[str]]:
    """sys.path as a fresh interpreter would have it in the phase's cwd, and why the
    phase cannot run on this interpreter's imports after all (None: it can)."""
    new = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    path = [os.getcwd(), *new, *base_path[1 + len(own_pythonpath):]]
    veto = (shadowed([p for p in path[:1 + len(new)] if p not in base_path], state.tops())
            or state.phase_problem())
    return path, veto


def _exit_after_atexit(code: int) -> None:
    """The phase's atexit handlers, then exit with `code`, skipping the interpreter's
    teardown (the preloaded torch's takes seconds)."""
    try:
        import atexit

        sys.stdout.flush()
        sys.stderr.flush()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)
