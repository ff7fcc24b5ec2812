"""Start one phase of a check in a fresh interpreter, with a timeout that kills the
whole process group (compile workers and g++ included).

Launching sits behind `Launcher` so that a faster launcher (a preloaded fork server)
can replace `SubprocessLauncher` without touching the rest.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Protocol, Sequence

from pytest_compilecache.lifetime import child_preexec

STDERR_TAIL_LINES = 40


def pytest_child_flags(plugin_loaded: bool, xdist_available: bool) -> List[str]:
    """Flags every child pytest session gets: our plugin by name where it would not be
    auto-loaded, and one process (the user's addopts may hold -n)."""
    flags = [] if plugin_loaded and not os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD") \
        else ["-p", "pytest_compilecache.plugin"]
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

    def stages(self, marks: Mapping[str, float]) -> Dict[str, float]:
        """Where the process's wall time went, from the child's marks (child.py): start-up
        (interpreter, pytest, import torch), setup (collection, fixtures: the model built
        and moved; import of torch._dynamo), eager (the reference run), record
        (comparisons, cache snapshot) and exit (atexit: compile pools, CUDA teardown).
        The compile+run is `{phase}_s`."""
        order = [("startup", self.started_at, marks.get("configured")),
                 ("setup", marks.get("configured"), marks.get("workload_start")),
                 ("eager", marks.get("workload_end"), marks.get("eager_end")),
                 ("record", marks.get("eager_end"), marks.get("written")),
                 ("exit", marks.get("written"), self.ended_at)]
        return {name: round(b - a, 3) for name, a, b in order
                if a and b and b >= a}

    def tail(self, lines: int = STDERR_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.rstrip().splitlines()[-lines:])


class Launcher(Protocol):
    def run(self, argv: Sequence[str], env: Mapping[str, str], cwd: str, log_path: Path,
            timeout: float) -> LaunchResult: ...


class SubprocessLauncher:
    """`python -m pytest ...` per phase: about 3 s of `import torch` on a GPU box."""

    def run(self, argv: Sequence[str], env: Mapping[str, str], cwd: str, log_path: Path,
            timeout: Optional[float]) -> LaunchResult:
        t0, started_at = time.perf_counter(), time.time()
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([sys.executable, *argv], env=dict(env), cwd=cwd,
                                    stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    preexec_fn=child_preexec)
            timed_out = False
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
        return LaunchResult(proc.returncode, timed_out, time.perf_counter() - t0, log_path,
                            started_at, time.time(), peak)


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
