"""What a phase leaves running, found and ended.

A daemon that a phase starts in a session of its own (`Popen(..., start_new_session=
True)` in a test body, a server a fixture forgot) escapes the kill of the phase's
process group, and would outlive the whole session. On Linux the process that launches
a phase is a child subreaper (prctl PR_SET_CHILD_SUBREAPER) while the phase runs: what
the phase orphans is re-parented to it, not to init, so after the phase it is found by
a walk of /proc by parent pid, killed and reaped. Elsewhere nothing is found (the
process group kill still applies).

The controller may be the user's pytest or an xdist worker, with children of its own:
there only children that appeared while the phase ran (the phase's re-parented orphans)
and what is below them are the phase's; while phases run side by side, only those that
carry its mark (`Contained`). The preloaded interpreter (forkserver.py) only
forks phases, one at a time: everything below it after a phase is that phase's.
What was left outside the phase's process group is named (`leftovers_note`); the
group's own (compile workers still exiting) is expected and ended without a word.
No pytest, no torch.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from typing import Collection, Dict, Iterator, List, Optional

from pytest_compilecache.proc import below, children, describe, kids_of, subtrees, table

_PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37


def _prctl(option: int, arg: object) -> Optional[int]:
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return int(ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0))
    except Exception:
        return None


def is_subreaper() -> bool:
    import ctypes

    flag = ctypes.c_int(0)
    return _prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag)) == 0 and flag.value != 0


def subreaper(on: bool) -> bool:
    """Make this process (not) the reaper of its descendants' orphans; False where the
    OS cannot (not Linux)."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, int(on)) == 0


def end_below(me: int, group: int, before: Collection[int] = (),
              timeout: float = 5.0, mark: Optional[str] = None) -> List[str]:
    """Kill and reap every process below `me` but the subtrees of `before` (its children
    from before the phase) and, given a `mark`, of children that do not carry it.
    Returns those outside the phase's process group `group`, described, as they were
    found alive."""
    said: Dict[int, str] = {}
    end_at = time.monotonic() + timeout
    while True:
        procs = table()
        kids = kids_of(procs)
        roots = [p for p in kids.get(me, []) if p not in before
                 and (mark is None or carries(p, mark))]
        found = subtrees(roots, kids)
        for pid in found:
            if procs[pid].state == "Z":
                continue
            if procs[pid].pgid != group and pid not in said:
                said[pid] = describe(pid)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid in roots:  # ours since they were orphaned: reap them, or they stay zombies
            try:
                os.waitpid(pid, os.WNOHANG)
            except OSError:
                pass
        if not found or time.monotonic() > end_at:
            return list(said.values())
        time.sleep(0.01)


def kill_below(pid: int) -> None:
    """SIGKILL every process below `pid` (a preloaded interpreter being closed: what its
    phase left is its to reap)."""
    for p in below(pid):
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


class Contained:
    """In the controller, around one phase: its orphans come to this process; `end`
    kills them once the phase is over. Where this process is no subreaper, and cannot
    become one, `end` finds nothing.

    The subreaper setting is the process's: on while any phase runs, back as it was once
    the last has ended. While phases run side by side (`side_by_side`: ahead.py), this
    process starts other things meanwhile (another phase, a baseline's recording, git),
    so what a phase left is told by its `mark` (the `PHASE_ENV=...` entry every process
    it starts inherits), not by having appeared while it ran; the phases still running
    are spared either way."""

    _lock = threading.Lock()
    _running: Dict[int, "Contained"] = {}  # by id: the phases between start and end
    _was = False  # whether this process was a subreaper before the first of them
    _side_by_side = 0

    def __init__(self, mark: Optional[str] = None) -> None:
        self.me = os.getpid()
        self.mark = mark
        self.pid: Optional[int] = None  # the phase's process, once started
        with Contained._lock:
            if not Contained._running:
                Contained._was = is_subreaper() if sys.platform.startswith("linux") else False
            self.on = Contained._was or subreaper(True)
            Contained._running[id(self)] = self
            self.before = set(children(self.me)) if self.on else set()

    def end(self, phase_pid: int) -> List[str]:
        """The phase (its own process, `phase_pid`, reaped already) is over."""
        with Contained._lock:
            if id(self) not in Contained._running:
                return []
            try:
                if not self.on:
                    return []
                others = [c for c in Contained._running.values() if c is not self]
                by_mark = bool(others or Contained._side_by_side)
                return end_below(self.me, phase_pid, self.before | {phase_pid} | {
                    c.pid for c in others if c.pid}, mark=self.mark if by_mark else None)
            finally:
                del Contained._running[id(self)]
                if not Contained._running and not Contained._was:
                    subreaper(False)


@contextlib.contextmanager
def side_by_side() -> Iterator[None]:
    """Phases may run side by side meanwhile: what each left is told by its mark."""
    with Contained._lock:
        Contained._side_by_side += 1
    try:
        yield
    finally:
        with Contained._lock:
            Contained._side_by_side -= 1


def carries(pid: int, mark: str) -> bool:
    """Whether process `pid`'s environment holds `mark` (`NAME=value`), as it started."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read(4 << 20)
    except OSError:
        return False
    return mark.encode() in environ.split(b"\0")


def leftovers_note(phase: str, leftovers: List[str]) -> str:
    """For the check's notes: `the cold phase left 1 process running, ended: ...`."""
    n = len(leftovers)
    return (f"the {phase} phase left {n} process{'es' if n != 1 else ''} running, ended: "
            + ", ".join(leftovers))
