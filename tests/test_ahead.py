"""Recordings side by side (controller/ahead.py), with no process: in a session whose
every path times nothing (--compile-cache-keys-only) the checks' phases run as many at
a time as it has slots, each forked from an interpreter of its own, and the checks are
still reported in pytest's order; a session that times its phases runs one at a time;
one that stops early (-x) leaves no root of the checks it never reported."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import pytest

from fakes import MARKED, Reply, SessionReplay, UseLauncher, load_record
from pytest_compilecache.launch.descendants import side_by_side
from pytest_compilecache.launch.lane import Lane
from pytest_compilecache.launch.launcher import SubprocessLauncher
from pytest_compilecache.launch.preloaded import PreloadedLauncher

CASES = ("pass_mlp", "fx_config_drift", "kernels_deleted")


class AtOnce(SessionReplay):
    """Replays each check's phases; the first `together` phases each wait until that
    many run at once (a barrier: one at a time breaks it and the phase raises)."""

    def __init__(self, records: Sequence[Dict[str, Any]], together: int) -> None:
        super().__init__(records)
        self.barrier = threading.Barrier(together, timeout=20)
        self.together = together
        self.lock = threading.Lock()
        self.running = self.most = 0
        self.lanes: List[int] = []
        self.narrowed: Optional[int] = None

    def narrow(self, lanes: int) -> None:
        self.narrowed = lanes

    def run(self, argv: Any, env: Any, cwd: str, log_path: Path, timeout: Any,
            lane: int = 0) -> Any:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.lanes.append(lane)
            wait = len(self.lanes) <= self.together
        try:
            if wait:
                self.barrier.wait()
            return super().run(argv, env, cwd, log_path, timeout, lane)
        finally:
            with self.lock:
                self.running -= 1


def _session(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
             launcher: SessionReplay, *args: str) -> Any:
    for rec in launcher_records(launcher):
        path, name = rec["nodeid"].split("::")
        pytester.makepyfile(**{path[:-3]: MARKED.format(name=name)})
    monkeypatch.setattr("os.cpu_count", lambda: 2)  # two CPU slots of one thread each
    return pytester.runpytest(
        "-p", "no:cacheprovider", "--import-mode=importlib", "--compile-cache-store=none",
        "--compile-cache-device=cpu", "--compile-cache-launcher=fresh",
        "--compile-cache-threads=1", f"--compile-cache-root={pytester.path / 'roots'}",
        "--compile-cache-report=report.json", "--compile-cache-check", *args,
        plugins=[UseLauncher(launcher)])


def launcher_records(launcher: SessionReplay) -> List[Dict[str, Any]]:
    return [r.record for r in launcher.by_check.values()]


@pytest.mark.parametrize("mode, together", [("--compile-cache-keys-only", 2),
                                            ("--compile-cache-via=local", 1)])
def test_recordings_run_side_by_side_and_are_reported_in_order(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, in_process: None,
        mode: str, together: int) -> None:
    records = [load_record(c) for c in CASES]
    launcher = AtOnce(records, together)
    result = _session(pytester, monkeypatch, launcher, mode)
    report = json.loads((pytester.path / "report.json").read_text())
    assert [c["nodeid"] for c in report["checks"]] == sorted(r["nodeid"] for r in records)
    # keys-only: two at once, each on an interpreter of its own; a check: one at a time
    assert launcher.most == together, result.stdout.str()[-2000:]
    # a recording starts one interpreter (ahead.py widens); a check's cold and warm two
    assert launcher.narrowed == (1 if together == 2 else None)
    if together == 2:
        result.assert_outcomes(passed=3)
        assert {c["verdict"] for c in report["checks"]} == {"recorded"}
        assert sorted(launcher.lanes[:2]) == [0, 1] and set(launcher.lanes) <= {0, 1}
        leases = [c["leases"][0] for c in report["checks"]]
        assert leases[0]["slot"] != leases[1]["slot"]
        assert leases[1]["acquired"] < leases[0]["released"]
    else:
        assert set(launcher.lanes) == {0, 1}  # cold on lane 0, warm on lane 1
    # a recorded or passing check leaves no root; a failing one keeps its own
    assert {str(p) for p in (pytester.path / "roots").glob("compilecache-*")} == \
        {c["cache_root"] for c in report["checks"] if c.get("cache_root")}


def test_a_session_that_stops_early_leaves_no_root_of_checks_it_never_reported(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, in_process: None) -> None:
    """-x: the first check's phase crashes; the checks recorded or queued beside it are
    not reported, as pytest ran none of them, and their roots go; the failed check keeps
    its own."""
    records = [load_record(c) for c in CASES]
    launcher = AtOnce(records, 2)
    first = sorted(r["nodeid"] for r in records)[0]  # pytest runs it first
    launcher.by_check[first].replies["cold"] = Reply(record=None, returncode=1)
    result = _session(pytester, monkeypatch, launcher, "--compile-cache-keys-only", "-x")
    result.assert_outcomes(failed=1)
    report = json.loads((pytester.path / "report.json").read_text())
    # as in a session one phase at a time: -x reports the checks pytest ran
    assert [(c["nodeid"], c["verdict"]) for c in report["checks"]] == [(first, "error")]
    assert launcher.closed
    kept = list((pytester.path / "roots").glob("compilecache-*"))
    assert len(kept) == 1 and report["checks"][0]["cache_root"] == str(kept[0])


# -- the launchers under phases side by side (real processes, no torch) -------------------

def _side_by_side(launcher: Any, tmp_path: Path, first: str, then: str,
                  running: Callable[[], bool]) -> Dict[str, Any]:
    """Python code `first` runs, and once `running()` says it does, `then` runs beside
    it on the same lane; their LaunchResults."""
    got: Dict[str, Any] = {}

    def run(name: str, code: str) -> None:
        got[name] = launcher.run(["-c", code], dict(os.environ), str(tmp_path),
                                 tmp_path / f"{name}.log", 60, lane=0)
    thread = threading.Thread(target=run, args=("first", first))
    thread.start()
    deadline = time.monotonic() + 30
    while not running() and time.monotonic() < deadline:
        time.sleep(0.01)
    run("then", then)
    thread.join()
    return got


SLEEP = "import time; time.sleep({})"
# a phase that leaves a daemon behind, in a session of its own, and ends
DAEMON = ("import subprocess, sys; subprocess.Popen([sys.executable, '-c', "
          "'import time; time.sleep(60)'], start_new_session=True)")


def test_a_phase_that_ends_beside_another_leaves_it_running(tmp_path: Path) -> None:
    """Fresh interpreters: the first phase's end ends what it left behind, never the
    phase started beside it (a child of the same controller)."""
    launcher = SubprocessLauncher()
    got = _side_by_side(launcher, tmp_path, SLEEP.format(0.5), SLEEP.format(1.5),
                        lambda: bool(launcher._running))
    assert (got["first"].returncode, got["then"].returncode) == (0, 0)
    assert got["first"].leftovers == [] and got["then"].leftovers == []


def test_beside_other_phases_a_phase_ends_only_what_carries_its_mark(tmp_path: Path) -> None:
    """While phases run side by side the controller starts other things meanwhile (git,
    a baseline's recording): a phase's end kills the daemon it left (its environment
    carries the phase's mark), never a process the controller started meanwhile."""
    launcher = SubprocessLauncher()
    meanwhile: List[subprocess.Popen] = []

    def start_meanwhile() -> bool:
        if launcher._running and not meanwhile:
            meanwhile.append(subprocess.Popen([sys.executable, "-c", SLEEP.format(60)]))
        return bool(meanwhile)
    with side_by_side():
        got = _side_by_side(launcher, tmp_path, DAEMON + "; " + SLEEP.format(1), SLEEP.format(0),
                            start_meanwhile)
    try:
        assert meanwhile[0].poll() is None, "the controller's own process was killed"
        assert len(got["first"].leftovers) == 1, got["first"].leftovers  # the daemon
    finally:
        meanwhile[0].kill()
        meanwhile[0].wait()


def test_a_phase_asking_for_a_lane_another_phase_holds_runs_fresh(tmp_path: Path) -> None:
    """A preloaded interpreter serves one phase at a time: a second phase asking for its
    lane meanwhile runs fresh, and says why."""
    launcher = PreloadedLauncher()
    try:
        got = _side_by_side(launcher, tmp_path, SLEEP.format(1.5), SLEEP.format(0),
                            lambda: 0 in launcher._busy and launcher._busy[0].locked())
    finally:
        launcher.close()
    assert (got["first"].returncode, got["then"].returncode) == (0, 0)
    assert got["first"].fresh_because == "no fork here"  # not `-m pytest`: no lane started
    assert got["then"].fresh_because == "lane 0's preloaded interpreter is running another phase"


@pytest.mark.parametrize("kind", [SubprocessLauncher, PreloadedLauncher])
def test_a_launcher_closed_meanwhile_ends_its_phases_and_starts_no_more(
        tmp_path: Path, kind: Any) -> None:
    """A session that stops early closes its launcher with phases still running beside
    (their threads wait on them): they end at once, and a phase asked for later is not
    started (its check is not reported)."""
    launcher = kind()
    got: Dict[str, Any] = {}
    thread = threading.Thread(target=lambda: got.update(long=launcher.run(
        ["-c", SLEEP.format(60)], dict(os.environ), str(tmp_path), tmp_path / "long.log", 120)))
    thread.start()
    fresh = getattr(launcher, "fresh", launcher)  # a preloaded one runs this one fresh
    deadline = time.monotonic() + 30
    while not fresh._running and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    launcher.close()
    thread.join(30)
    assert not thread.is_alive() and time.monotonic() - started < 10
    assert got["long"].returncode == -9
    later = launcher.run(["-c", "pass"], dict(os.environ), str(tmp_path), tmp_path / "later.log", 60)
    assert later.returncode is None and not (tmp_path / "later.log").exists()


def test_a_preloads_hello_sent_before_a_fork_is_read_before_its_reply(tmp_path: Path) -> None:
    """Another phase's thread may send a lane a preload between the lane's last hello
    and its fork request: the interpreter answers in order, so the fork's reply comes
    after that preload's hello, which is taken as the lane's hello (not as a broken
    reply that would turn forking off)."""
    phase = subprocess.Popen([sys.executable, "-c", SLEEP.format(30)], start_new_session=True)
    hello = {"reads": {}, "problem": None, "marks": []}
    replies = [hello, {"pid": phase.pid}, {"status": 0, "maxrss_kb": 2048, "leftovers": []}]
    lane = Lane.__new__(Lane)  # its protocol, without an interpreter: the replies above
    lane.lock, lane.hello, lane.pending, lane.gone = threading.RLock(), {"ready": True}, 1, False
    lane.send = lambda msg: None  # type: ignore[method-assign]
    lane.receive = lambda deadline: replies.pop(0) if replies else None  # type: ignore[method-assign]
    launcher = PreloadedLauncher()
    try:
        got = launcher._forked(lane, ["-m", "pytest"], {}, str(tmp_path), tmp_path / "p.log",
                               None, time.perf_counter(), time.time())
    finally:
        phase.kill()
        phase.wait()
    assert not isinstance(got, str), got
    assert (got.returncode, got.forked, launcher.off) == (0, True, None)
    assert (lane.hello, lane.pending) == (hello, 0)
