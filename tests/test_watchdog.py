"""The session's watchdog (pytest_compilecache/watchdog.py) with real processes and real
signals, no torch: a stand-in controller starts it, then a phase whose body ignores
SIGTERM and starts a daemon in a session of its own, and a worker that ignores SIGTERM
too. The sessions' own tests (a real controller SIGKILLed mid-phase) are in
test_leftovers.py and test_session_ends.py."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from typing import Dict, List

import pytest

from test_faults import marked

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="Linux /proc")

CONTROLLER = '''
import os, signal, subprocess, sys, time
from pytest_compilecache import lifetime

dog = lifetime.Watchdog.start()
lifetime.interrupt_on_sigterm(forward=True)  # as the controller: to its children too
stubborn = "import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN)"
daemon = "; subprocess.Popen(['sleep', '600'], start_new_session=True)"
phase = {**os.environ, lifetime.PHASE_ENV: "t.py::test_x [warm]"}
subprocess.Popen([sys.executable, "-c", stubborn + daemon + "; time.sleep(600)"], env=phase)
subprocess.Popen([sys.executable, "-c", stubborn + "; time.sleep(600)"])  # a worker
while len(subprocess.run(["pgrep", "-P", str(os.getpid())], capture_output=True).stdout
          .split()) < 2:
    time.sleep(0.05)
time.sleep(0.5)  # the phase's daemon started
if sys.argv[1] == "stop":
    dog.stop()
    print(os.environ.get(lifetime.SESSION_ENV), flush=True)
print("ready", flush=True)
try:
    time.sleep(600)
except KeyboardInterrupt:  # a CI cancel: the session ends as it does
    dog.stop()
'''


def _controller(how: str) -> tuple:
    mark = f"COMPILECACHE_WATCHDOG_TEST={uuid.uuid4().hex}"
    env = {**os.environ, mark.split("=")[0]: mark.split("=")[1]}
    proc = subprocess.Popen([sys.executable, "-c", CONTROLLER, how], env=env,
                            stdout=subprocess.PIPE, text=True)
    return proc, mark


def _commands(found: List[Dict[str, str]]) -> List[str]:
    return sorted(p["cmd"].split(" ")[0].rsplit("/", 1)[-1] for p in found)


def _end(proc: "subprocess.Popen[str]", mark: str) -> None:
    proc.kill()
    proc.wait()
    for p in marked(mark):
        os.kill(int(p["pid"]), signal.SIGKILL)


def test_a_killed_controller_leaves_nothing_whatever_its_processes_do_with_sigterm() -> None:
    """The phase, its daemon (a session of its own, re-parented to init) and the worker
    all ignore SIGTERM; the controller is SIGKILLed: a few seconds later nothing of
    them runs."""
    proc, mark = _controller("kill")
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        before = _commands(marked(mark))  # the controller, the watchdog, phase, worker
        assert before == ["python", "python", "python", "python", "sleep"], before
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        end = time.time() + 8
        while marked(mark) and time.time() < end:
            time.sleep(0.1)
        assert not marked(mark)
    finally:
        _end(proc, mark)


def test_the_end_of_a_session_ends_what_its_phases_left_and_takes_its_mark_away() -> None:
    """At the session's end the watchdog is told `end`: what phases started goes (the
    daemon), the rest is the session's own to end (a worker xdist ends); the mark
    leaves the controller's environment (a pytester session runs in the tests')."""
    proc, mark = _controller("stop")
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "None\n"
        assert proc.stdout.readline() == "ready\n"
        assert _commands(marked(mark)) == ["python", "python"]  # the controller, the worker
    finally:
        _end(proc, mark)


def test_a_cancelled_session_ends_what_its_phases_left() -> None:
    """SIGTERM to the controller (a CI cancel), which passes it on to its children: the
    watchdog among them ended at once and swept nothing; the daemon of a phase whose
    body ignores SIGTERM ran on after the session."""
    proc, mark = _controller("cancel")
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        assert "sleep" not in _commands(marked(mark))
    finally:
        _end(proc, mark)
