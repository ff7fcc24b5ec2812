"""Process lifetimes: no phase child outlives the process that leased it, nothing a
session started outlives the session, and SIGTERM (a CI cancel, `timeout`, Kubernetes)
shuts a session down as Ctrl-C does.

- Every process of a check session (controller, xdist worker) turns SIGTERM into
  KeyboardInterrupt: the launcher then kills the phase's process group, and pytest
  finishes the session (report written, shared dirs removed).
- A process that dies without a word (SIGKILL, the OOM killer) is covered by Linux's
  parent-death signal: a phase gets SIGKILL when its launcher dies (a test body may
  ignore SIGTERM, as a framework's graceful-shutdown handler does); an xdist worker and
  a preloaded interpreter get SIGTERM and end on their own.
- What those leave (a daemon a body started in a session of its own, compile workers)
  is ended by the session's watchdog (`Watchdog`, watchdog.py) when the controller is
  gone, by the mark every process of the session inherits.
Elsewhere than Linux only the SIGTERM handling applies.
No pytest, no torch.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from typing import IO, Any, Optional

from pytest_compilecache.proc import below, children

_PR_SET_PDEATHSIG = 1
# set by the preloaded launcher in a phase it forked: the process the phase dies with
LAUNCHER_PID_ENV = "PYTEST_COMPILECACHE_LAUNCHER_PID"
# in every phase's environment: `<nodeid> [<phase>]`, which check and phase a process serves
PHASE_ENV = "PYTEST_COMPILECACHE_PHASE"
# in every process a check session starts: the session's token, for its watchdog
SESSION_ENV = "PYTEST_COMPILECACHE_SESSION"
received: Optional[str] = None  # the signal that interrupted this process, if any


def parent_death_signal(sig: int = signal.SIGTERM) -> bool:
    """Ask the kernel to send `sig` to this process when its parent dies (Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig)) == 0
    except Exception:
        return False


def name_process(marker: str) -> bool:
    """A forked phase's name in ps and top (/proc/self/comm, 15 characters: `cold test_a`),
    from its `PHASE_ENV` marker: its command line is its preloaded interpreter's."""
    nodeid, _, phase = marker.rpartition(" [")
    try:
        with open("/proc/self/comm", "w") as f:
            f.write(f"{phase.rstrip(']')} {nodeid.rsplit('::', 1)[-1]}"[:15])
        return True
    except OSError:
        return False


def child_preexec() -> None:
    """preexec_fn of a process the session runs (a preloaded interpreter, a private
    redis-server): it is told when its launcher dies."""
    parent_death_signal(signal.SIGTERM)


def phase_preexec() -> None:
    """preexec_fn of a phase: it dies with its launcher, whatever the test body does
    with its signals (SIGKILL cannot be caught)."""
    parent_death_signal(signal.SIGKILL)


def interrupt_on_sigterm(forward: bool = False) -> None:
    """SIGTERM raises KeyboardInterrupt in the main thread, as Ctrl-C does. `forward`
    (the controller): pass it on to this process's children first. An xdist worker
    blocked in a phase hears nothing of the controller's interrupt until its check ends,
    and xdist kills it (SIGKILL) 10 s into the teardown: it never removes its cache
    root or its shared precompiled-header dir. A Ctrl-C at a terminal reaches the whole
    process group; a CI cancel or `kill` reaches the controller alone."""

    def handler(signum: int, frame: Any) -> None:
        global received
        received = signal.Signals(signum).name
        if forward:
            signal_children(signum)
        raise KeyboardInterrupt(f"received {received}")

    try:
        signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave SIGTERM as it is
        pass


def signal_children(sig: int) -> None:
    """Send `sig` to every direct child of this process."""
    for pid in children(os.getpid()):
        try:
            os.kill(pid, sig)
        except OSError:
            continue


def deprioritize_descendants() -> int:
    """Lowest CPU priority for every process below this one: after a phase's workload,
    torch's compile-worker pool (one worker per core, each importing torch) may still
    be starting, and starved the phase's own comparisons (3-5 s instead of 0.5 on an
    H200). Workers forked later inherit the lower priority; nothing is stopped.
    Returns how many processes were reniced."""
    done = 0
    for pid in below(os.getpid()):
        try:
            os.setpriority(os.PRIO_PROCESS, pid, 19)
            done += 1
        except OSError:
            continue
    return done


def die_with_launcher(launcher_pid: Optional[int]) -> None:
    """In a phase child: on SIGTERM (a signal to the session) kill this process group,
    compile workers and g++ included, then ourselves. If the launcher is already gone
    (it died before the parent-death signal was armed), now. A body may replace the
    handler: the launcher's own end (its parent-death signal, SIGKILL) and the session's
    watchdog do not depend on it."""

    def handler(signum: int, frame: Any) -> None:
        os.killpg(os.getpgrp(), signal.SIGKILL)

    signal.signal(signal.SIGTERM, handler)
    if launcher_pid is not None and os.getppid() != launcher_pid:
        handler(signal.SIGTERM, None)


class Watchdog:
    """The controller's side of the session's watchdog (watchdog.py): started with the
    session, its mark put in this process's environment (every process the session
    starts inherits it), told `end` when the session ends. Never on a system without
    /proc (nothing there would find the mark)."""

    def __init__(self, proc: "subprocess.Popen[bytes]", mark: str,
                 before: Optional[str]) -> None:
        self.proc, self.mark, self.before = proc, mark, before

    @classmethod
    def start(cls) -> Optional["Watchdog"]:
        if not os.path.isdir("/proc/self"):
            return None
        token = uuid.uuid4().hex
        env = {k: v for k, v in os.environ.items() if k != SESSION_ENV}
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "watchdog.py")
        try:  # in a session of its own: a Ctrl-C to the terminal's group leaves it
            proc = subprocess.Popen([sys.executable, "-I", "-S", script,
                                     f"{SESSION_ENV}={token}", f"{PHASE_ENV}="],
                                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, cwd="/", env=env,
                                    start_new_session=True)
        except OSError:
            return None
        before = os.environ.get(SESSION_ENV)
        os.environ[SESSION_ENV] = token
        return cls(proc, token, before)

    def stop(self) -> None:
        """The session is over: what its phases left is ended (the watchdog does it),
        and the mark leaves this process's environment (a pytester session runs in the
        process of the tests that started it)."""
        if os.environ.get(SESSION_ENV) == self.mark:
            if self.before is None:
                del os.environ[SESSION_ENV]
            else:
                os.environ[SESSION_ENV] = self.before
        pipe: IO[bytes] = self.proc.stdin  # type: ignore[assignment]
        try:
            pipe.write(b"end")
            pipe.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
