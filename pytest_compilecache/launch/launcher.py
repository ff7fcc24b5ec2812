"""Start one phase of a check, as fresh as a restart, with a timeout that kills the
whole process group (compile workers and g++ included).

`SubprocessLauncher`: a fresh interpreter per phase. `preloaded.PreloadedLauncher` (the
default) forks phases from interpreters that imported torch and pytest already; both
behind the `Launcher` protocol, both returning a `LaunchResult`.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Protocol, Sequence, Set

from pytest_compilecache.launch.descendants import Contained
from pytest_compilecache.isolation import CHILD_SPEC_ENV
from pytest_compilecache.lifetime import PHASE_ENV, phase_preexec
from pytest_compilecache.launch.phaselog import STDERR_TAIL_LINES, CappedLog, open_log
from pytest_compilecache.launch.phaselog import tail_of
from pytest_compilecache.launch.phaselog import useful_tail as useful_tail  # where it was


def pytest_child_flags(plugin_loaded: bool, xdist_available: bool) -> List[str]:
    """Flags every child pytest session gets: our plugin by name where it would not be
    auto-loaded, and one process (the user's addopts may hold -n)."""
    flags = ([] if plugin_loaded and not os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
             else ["-p", "pytest_compilecache.plugin"])
    return flags + (["-n", "0"] if xdist_available else [])


@dataclass(frozen=True)
class LaunchResult:
    returncode: Optional[int]
    timed_out: bool
    wall_s: float
    log_path: Path
    started_at: float = 0.0  # time.time() at launch and at exit, to place the child's marks
    ended_at: float = 0.0
    peak_rss_mb: Optional[float] = None  # the child's (and its reaped children's) peak RSS
    fresh_because: Optional[str] = None  # the preloaded launcher started this one fresh
    forked: bool = False  # from a preloaded interpreter
    # what the phase left running outside its process group, ended: "sleep 600 (pid 1234)"
    leftovers: List[str] = field(default_factory=list)
    # of wall_s: the wait for the preloaded interpreter's imports before the fork
    waited_s: float = 0.0

    def stages(self, marks: Mapping[str, float]) -> Dict[str, float]:
        """Where the process's wall time went, from the child's marks (child/phase.py): start-up
        (interpreter, pytest, import torch), setup (collection, fixtures: the model built
        and moved; import of torch._dynamo), eager (the reference run), record
        (comparisons, cache snapshot) and exit (atexit: compile pools, CUDA teardown).
        The compile+run is `{phase}_s`."""
        order = [("startup", self.started_at, marks.get("configured")),
                 ("setup", marks.get("configured"), marks.get("workload_start")),
                 ("eager", marks.get("workload_end"), marks.get("eager_end")),
                 ("record", marks.get("eager_end"), marks.get("written")),
                 ("exit", marks.get("written"), self.ended_at)]
        # where setup and record went, when the check's form marks it (ModelCase)
        order += [("setup_collect", marks.get("configured"), marks.get("collected")),
                  ("setup_fixtures", marks.get("collected"), marks.get("fixtures_done")),
                  ("setup_to_device", marks.get("fixtures_done"), marks.get("on_device")),
                  ("setup_observe", marks.get("on_device"), marks.get("workload_start")),
                  ("record_compare", marks.get("eager_end"), marks.get("compared")),
                  ("record_finish", marks.get("compared"), marks.get("written"))]
        return {name: round(b - a, 3) for name, a, b in order
                if a and b and b >= a}

    def tail(self, lines: int = STDERR_TAIL_LINES) -> str:
        """What went wrong, from the end of the log (never all of it: a phase may print
        without end)."""
        return tail_of(self.log_path, lines)


class Launcher(Protocol):
    def run(self, argv: Sequence[str], env: Mapping[str, str], cwd: str, log_path: Path,
            timeout: Optional[float], lane: int = 0) -> LaunchResult: ...

    def close(self) -> None: ...

    def preload(self, modules: Sequence[str]) -> None: ...

    def start(self, env: Mapping[str, str], cwd: str) -> None: ...


class SubprocessLauncher:
    """`python -m pytest ...` per phase: about 3 s of `import torch` on a GPU box."""

    def __init__(self) -> None:
        self._running: Set["subprocess.Popen[bytes]"] = set()  # phases side by side: ahead.py
        self._lock = threading.Lock()
        self.closed = False

    def close(self) -> None:
        """Ends the phases still running (a session that stopped early: their runs see
        them end) and starts no more."""
        with self._lock:
            self.closed = True
            running = list(self._running)
        for proc in running:
            _kill_group(proc, only_leftovers=True)

    def preload(self, modules: Sequence[str]) -> None:
        pass

    def start(self, env: Mapping[str, str], cwd: str) -> None:
        pass

    def run(self, argv: Sequence[str], env: Mapping[str, str], cwd: str, log_path: Path,
            timeout: Optional[float], lane: int = 0) -> LaunchResult:
        t0, started_at = time.perf_counter(), time.time()
        env = marked(env, argv, log_path)
        with self._lock:  # started, or not at all once closed
            if self.closed:
                return LaunchResult(None, False, 0.0, log_path, started_at, time.time())
            # what the phase orphans comes here, to be ended after it
            contained = Contained(f"{PHASE_ENV}={env[PHASE_ENV]}")
            log = open_log(log_path)
            try:
                proc = subprocess.Popen([sys.executable, *argv], env=dict(env), cwd=cwd,
                                        stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True,
                                        preexec_fn=phase_preexec)
            except BaseException:
                contained.end(-1)
                raise
            finally:
                os.close(log)
            contained.pid = proc.pid
            self._running.add(proc)
        timed_out = False
        try:
            with CappedLog(log_path):  # its thread starts after the fork
                try:
                    peak = _wait(proc, None if timeout is None else t0 + timeout)
                    if peak is False:
                        timed_out = True
                        _kill_group(proc)
                        peak = None
                except BaseException:  # KeyboardInterrupt: leave no compile workers behind
                    _kill_group(proc)
                    raise
                # grandchildren (compile workers) may outlive a child that exited normally
                _kill_group(proc, only_leftovers=True)
                left = contained.end(proc.pid)
        finally:
            contained.end(proc.pid)  # after an interrupt: nothing more to say, end them
            with self._lock:
                self._running.discard(proc)
        return LaunchResult(proc.returncode, timed_out, time.perf_counter() - t0, log_path,
                            started_at, time.time(), peak, leftovers=left)


def marked(env: Mapping[str, str], argv: Sequence[str], log_path: Path) -> Dict[str, str]:
    """The phase's environment with `PHASE_ENV`: `<nodeid> [<phase>]`, from the check's
    spec (else the command line's target and the log's name), so that an operator can
    tell which process is which, whatever it starts."""
    nodeid, phase = (argv[2] if len(argv) > 2 else "?"), log_path.stem
    try:
        with open(env[CHILD_SPEC_ENV]) as f:
            spec = json.load(f)
        nodeid, phase = str(spec.get("nodeid") or nodeid), str(spec.get("phase") or phase)
    except (KeyError, OSError, ValueError, AttributeError):
        pass
    return {**env, PHASE_ENV: f"{nodeid} [{phase}]"}


def _wait(proc: "subprocess.Popen[bytes]", deadline: Optional[float]) -> Any:
    """Reap the child through wait4, which gives its peak resident memory (MB; None
    where the OS has no wait4). False: the deadline passed first, the child lives."""
    if not hasattr(os, "wait4"):
        try:
            proc.wait(timeout=None if deadline is None else max(0.0, deadline - time.perf_counter()))
        except subprocess.TimeoutExpired:
            return False
        return None
    delay = 0.005
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return round(usage.ru_maxrss / 1024, 1)  # KiB on Linux
        if deadline is not None and time.perf_counter() >= deadline:
            return False
        time.sleep(delay)
        delay = min(0.1, delay * 2)


def _kill_group(proc: "subprocess.Popen[bytes]", only_leftovers: bool = False) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if not only_leftovers:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
