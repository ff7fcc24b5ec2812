"""A check session's watchdog, a process of its own: nothing the session started
outlives it, whatever those processes do with their signals.

A phase's parent-death signal ends the phase, but not what it started in a session of
its own (a daemon, a server a fixture forgot): those were re-parented to the launcher,
the subreaper that ends them after the phase (launch/descendants.py), and it dies with
a killed controller. A test body that ignores SIGTERM (a framework's graceful-shutdown
handler) and starts a `setsid` daemon left both running after a SIGKILL of the
controller, forever (issue 53).

The controller starts this process (lifetime.Watchdog) in a session of its own, holding
the write end of its stdin, and marks its own environment with `SESSION=<token>`: every
process the session starts inherits the mark (xdist workers, preloaded interpreters,
phases, what a test body starts, a daemon gone to a session of its own). When the pipe
closes, the controller is gone:
- at the session's end (it said `end` first): the processes its phases left
  (those whose environment also has `PHASE=`) are killed;
- without a word (SIGKILL, the OOM killer): those at once; every other process with the
  mark (xdist workers, preloaded interpreters, which end on their own parent-death
  signal and clean up) after GRACE_S, then this process exits.
What clears its environment before it starts a daemon is not told apart.

Started by path with `python -I -S`: the standard library alone, nothing of the package
(its import takes longer than this process's whole run), no site packages. Linux
(/proc) only.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from typing import List

GRACE_S = 3.0  # for the workers to end on their own parent-death signal and clean up
SWEEP_S = 5.0  # what is still respawning after that is left


def marked(session: bytes, phase: bytes) -> List[int]:
    """Live processes whose environment, as they started, holds the `session` entry
    (and, given `phase`, an entry that starts with it), this one left out."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                entries = f.read().split(b"\0")
        except OSError:  # gone, or another user's
            continue
        if session in entries and (not phase or any(e.startswith(phase) for e in entries)):
            found.append(int(name))
    return found


def sweep(session: bytes, phase: bytes, within: float) -> None:
    """Kill those `marked` until none is left (what they fork meanwhile included)."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        found = marked(session, phase)
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue
        time.sleep(0.02)


def wait_gone(session: bytes, within: float) -> None:
    end = time.monotonic() + within
    while marked(session, b"") and time.monotonic() < end:
        time.sleep(0.05)


def main(argv: List[str]) -> None:
    """`watchdog.py SESSION_ENTRY PHASE_PREFIX`: wait for stdin to close, then sweep."""
    session, phase = argv[0].encode(), argv[1].encode()
    # the controller passes a SIGTERM on to its children (lifetime.interrupt_on_sigterm),
    # this one included: it ends when the pipe closes, after its sweep, and not before
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    said = b""
    while True:
        chunk = os.read(0, 64)
        if not chunk:
            break
        said += chunk
    sweep(session, phase, SWEEP_S)
    if not said.startswith(b"end"):  # the controller died without a word
        wait_gone(session, GRACE_S)
        sweep(session, b"", SWEEP_S)


if __name__ == "__main__":
    main(sys.argv[1:])
