"""What a session says of its slots and of its xdist workers (issue 52 point 4): the
header names the device slots and what the workers do with them; under xdist the
controller (whose workers have no terminal) says each check's start and end in a log
and, every so often, what each worker is running. Phases are replayed from recorded
records (tests/data/records), in the workers too (their conftest swaps the launcher)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, List

import pytest

from fakes import MARKED, load_record
from pytest_compilecache.controller import watch
from pytest_compilecache.controller.progress import Workers

CASES = ("pass_mlp", "fx_config_drift")
TESTS = Path(__file__).parent

# the workers' conftest: each phase replayed from its record, a second long
WORKER_CONFTEST = f'''
import os
import sys
import time

import pytest

sys.path.insert(0, {str(TESTS)!r})
from fakes import SessionReplay, load_record  # noqa: E402


class Slow(SessionReplay):
    def run(self, argv, env, *args, **kwargs):
        time.sleep(1.5)
        crash_in = os.environ.get("NP_CRASH_IN")
        if crash_in and crash_in in " ".join(map(str, argv)):
            os._exit(1)  # the worker dies in the check's phase
        return super().run(argv, env, *args, **kwargs)


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    session = config.pluginmanager.get_plugin("compilecache-session")
    if session is not None and getattr(config, "workerinput", None) is not None:
        session.launcher = Slow([load_record(c) for c in {CASES!r}])
'''


def _session(pytester: pytest.Pytester, *args: str) -> Any:
    for case in CASES:
        path, name = load_record(case)["nodeid"].split("::")
        pytester.makepyfile(**{path[:-3]: MARKED.format(name=name)})
    pytester.makeconftest(WORKER_CONFTEST)
    return pytester.runpytest(
        "-p", "no:cacheprovider", "--import-mode=importlib", "--compile-cache-store=none",
        "--compile-cache-device=cpu", "--compile-cache-launcher=fresh",
        f"--compile-cache-root={pytester.path / 'roots'}", "--compile-cache-check", *args)


def test_the_header_says_two_workers_share_one_cpu_slot(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, in_process: None) -> None:
    """The issue's machine: 2 cores, a check's threads the core count, -n 2."""
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    result = _session(pytester, "-n", "2", "--compile-cache-threads=2", "--collect-only")
    result.stdout.fnmatch_lines([
        "compile-cache: 1 device slot (CPU: 2 cores, --compile-cache-threads=2 a check); "
        "2 xdist workers share it: 1 waits while another compiles (more at once: a lower "
        "--compile-cache-threads; fewer waiting: -n 1)"])


def test_the_header_without_xdist_says_one_at_a_time(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, in_process: None) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    result = _session(pytester, "--compile-cache-threads=2", "--collect-only")
    result.stdout.fnmatch_lines([
        "compile-cache: 2 device slots (CPU: 4 cores, --compile-cache-threads=2 a check); "
        "checks run one at a time in this process"])


@pytest.mark.parametrize("verbosity", ["-q", "-v"])
def test_an_xdist_log_says_each_check_start_end_and_what_runs_while_silent(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, in_process: None,
        verbosity: str) -> None:
    """Not a terminal (pytester's output): a line per start and end, with the worker,
    and the heartbeat (30 s in a session, a fraction of a second here); each a line of
    its own, after pytest's progress dots (-q) or node ids (-v), with no blank one."""
    monkeypatch.setattr(watch, "HEARTBEAT_S", 0.5)
    result = _session(pytester, "-n", "2", "--compile-cache-threads=1", verbosity,
                      f"--compile-cache-report={pytester.path / 'r.json'}")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    timeline = json.loads((pytester.path / "r.json").read_text())["timeline"]
    for worker in ("gw0", "gw1"):  # each worker's instants, from the controller's start
        assert 0 < timeline[f"{worker} start"] < timeline[f"{worker} collected"]
        assert timeline[f"{worker} collected"] < timeline[f"{worker} sessionfinish"]
        assert timeline[f"{worker} sessionfinish"] < timeline["report"], timeline
    for case in CASES:
        nodeid = load_record(case)["nodeid"]
        result.stdout.fnmatch_lines([f"compile-cache: [[]gw?[]] started {nodeid}",
                                     f"compile-cache: [[]gw?[]] * {nodeid} (* s)"])
    result.stdout.fnmatch_lines(["compile-cache: * check(s) done; running: [[]gw?[]] * s (*)*"])
    assert out.count(" started ") == len(CASES), out
    said = out.splitlines()  # (xdist's own blank line comes before the first)
    mine = [i for i, line in enumerate(said) if line.startswith("compile-cache: [gw")]
    assert all(said[i - 1].strip() for i in mine[1:]), out


def test_on_a_terminal_only_the_heartbeat_is_said() -> None:
    said: List[str] = []
    now = [0.0]
    workers = Workers(said.append, log=False, every_s=30, clock=lambda: now[0],
                      held=lambda: {"t.py::test_a [cold]": "cpu#0"})
    workers.started("gw0", "t.py::test_a")
    workers.started("gw1", "t.py::test_b")
    now[0] = 29.0
    workers.beat()
    assert said == []
    now[0] = 31.0
    workers.beat()
    workers.beat()  # not again until 30 s more
    workers.finished("gw0", "t.py::test_a", "passed")
    assert said == ["compile-cache: 0 check(s) done; running: [gw0] t.py::test_a 31 s "
                    "(cold on cpu#0), [gw1] t.py::test_b 31 s (holds no slot)"]


def test_the_heartbeat_reads_who_holds_which_slot_from_the_leases(tmp_path: Path) -> None:
    """The controller runs no phase: what its workers' phases hold, it reads from the
    holder files their leases write in the session's lock dir."""
    from pytest_compilecache.controller.gpus import SlotPool, cpu_slots, held_slots

    pool = SlotPool(tmp_path / "locks", cpu_slots(2, 1), timeout=5)
    with pool.lease("t.py::test_a [warm]"):
        assert held_slots(str(tmp_path / "locks")) == {"t.py::test_a [warm]": "cpu#0"}
    assert held_slots(str(tmp_path / "locks")) == {}


def test_a_check_whose_worker_died_is_said_to_have_ended(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, in_process: None) -> None:
    """xdist's report of a crashed worker carries no keywords: the check the worker was
    running still ends, and the heartbeat no longer counts it as running."""
    monkeypatch.setattr(watch, "HEARTBEAT_S", 0.5)
    monkeypatch.setenv("NP_CRASH_IN", "drift")
    result = _session(pytester, "-n", "2", "--compile-cache-threads=1")
    result.stdout.fnmatch_lines(
        ["compile-cache: [[]gw?[]] failed drift/test_drift.py::test_drift*"])
