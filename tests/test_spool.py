"""Issue 29, item 3: the controller keeps a check's summary row, and its full result on
disk until the report is streamed from there. The rows must print the same summary as
the results (real reports of tests/data/), the report the same checks; the ledger's
worker files join the spool. The memory it saves is measured by
benchmarks/scale/memory.py, not here."""
from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any, Dict, List

import pytest

from pytest_compilecache.controller import ledger
from pytest_compilecache.controller.ledger import UNPUBLISHED, Ledger, Unpublished
from pytest_compilecache.controller.spool import Spool
from pytest_compilecache.model import CheckResult
from pytest_compilecache.render import lines as tx, report

DATA = Path(__file__).parent / "data"
REPORTS = ["report_cpu_examples", "report_drift", "report_gpu_pass"]


def results_of(name: str) -> List[CheckResult]:
    return [CheckResult.from_json(c)
            for c in json.loads((DATA / f"{name}.json").read_text())["checks"]]


def heavy(nodeid: str, verdict: str = "pass") -> CheckResult:
    """A result as big as a CPU Linear's was before version 3 (~300 KB of components)."""
    comps = [[f"c{i}", "h" * 52, "v" * 400] for i in range(640)]
    return CheckResult(nodeid=nodeid, verdict=verdict,
                       graphs=[{"phase": "cold", "components": comps}],
                       timings={"cold_s": 5.0, "warm_s": 1.0, "cold_process_s": 6.0})


@pytest.mark.parametrize("name", REPORTS)
def test_rows_print_the_summary_the_results_print(name) -> None:
    results = results_of(name)
    rows = [r.summary_row() for r in results]
    assert tx.summary_lines(rows) == tx.summary_lines(results)
    assert [r.cache_root for r in rows] == [r.cache_root for r in results]


def test_a_n_a_row_keeps_the_note_the_summary_quotes_and_a_row_is_small() -> None:
    r = heavy("t.py::test_a", "n/a")
    r.notes = ["this torch has no mega-cache", "another note"]
    r.via = "mega"
    row = r.summary_row()
    assert row.notes == ["this torch has no mega-cache"] and row.via == "mega"
    assert tx.summary_lines([row]) == tx.summary_lines([r])
    assert len(json.dumps(row.to_json())) < 1_500 < len(json.dumps(r.to_json())) // 100


def test_the_spool_keeps_rows_and_streams_every_result_in_order(tmp_path) -> None:
    spool = Spool(str(tmp_path))
    rows = [spool.add(heavy(f"t.py::test_{i}")) for i in range(3)]
    assert rows == spool.rows and all(not r.graphs for r in rows)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "check-000000.json", "check-000001.json", "check-000002.json"]
    checks = list(spool.checks())
    assert [c["nodeid"] for c in checks] == [f"t.py::test_{i}" for i in range(3)]
    assert checks[0] == heavy("t.py::test_0").to_json()
    (tmp_path / "check-000001.json").unlink()  # gone under the session: its row at least
    assert [c["nodeid"] for c in spool.checks()] == [f"t.py::test_{i}" for i in range(3)]


def test_without_a_directory_the_spool_keeps_results_in_memory(tmp_path) -> None:
    spool = Spool(None)
    r = heavy("t.py::test_a")
    assert spool.add(r) is r and list(spool.checks()) == [r.to_json()]
    (tmp_path / "file").write_text("")  # a directory that cannot be made: as a full disk
    refused = Spool(str(tmp_path / "file" / "spool"))
    assert refused.add(r) is r and list(refused.checks()) == [r.to_json()]


def write(path: Path, report_: Dict[str, Any], **kw: Any) -> Dict[str, Any]:
    report.write_report(str(path), report_, **kw)
    return json.loads(path.read_text())


def test_a_streamed_report_holds_what_a_listed_one_holds(tmp_path) -> None:
    spool = Spool(str(tmp_path / "spool"))
    results = [heavy("t.py::test_a"), heavy("t.py::test_b", "fail")]
    for r in results:
        spool.add(r)
    streamed = report.build_report(spool.rows, {"device": "cpu"}, "0", None,
                                   checks=report.Streamed(spool.ids(), spool.checks))
    listed = report.build_report(results, {"device": "cpu"}, "0", None)
    assert streamed["summary"] == listed["summary"] == {
        "pass": 1, "fail": 1, "error": 0, "recorded": 0, "n/a": 0, "not run": 0}
    a = write(tmp_path / "a.json", {**streamed, "exitstatus": 1})
    b = write(tmp_path / "b.json", {**listed, "exitstatus": 1})
    assert {k: v for k, v in a.items() if k != "created"} == \
        {k: v for k, v in b.items() if k != "created"}
    assert report.problem(a) is None and a["checks"][0]["graphs"] == results[0].to_json()["graphs"]


def test_a_streamed_report_keeps_a_concurrent_sessions_checks(tmp_path) -> None:
    path = tmp_path / "r.json"
    started = report.now()
    write(path, report.build_report([heavy("t.py::test_theirs", "fail")], {}, "0"))
    spool = Spool(str(tmp_path / "spool"))
    spool.add(heavy("t.py::test_mine"))
    merged = write(path, report.build_report(spool.rows, {}, "0", None, checks=report.Streamed(
        spool.ids(), spool.checks)), since=started)
    assert [c["nodeid"] for c in merged["checks"]] == ["t.py::test_theirs", "t.py::test_mine"]
    assert merged["summary"]["pass"] == 1 and merged["summary"]["fail"] == 1


def test_the_ledger_adds_the_workers_results_and_the_checks_without_one(tmp_path) -> None:
    worker = Ledger(str(tmp_path))
    worker.publish("collected", {"nodeids": ["t.py::test_w", "t.py::test_died", "t.py::test_x"]})
    worker.publish("started", {"nodeid": "t.py::test_died"})
    worker.publish("result", heavy("t.py::test_w").to_json())
    controller, spool = Ledger(str(tmp_path)), Spool(str(tmp_path))
    spool.add(heavy("t.py::test_mine"))
    controller.failed_report("t.py::test_died", "\n".join(f"line {i}" for i in range(40)))
    controller.collect(spool)
    controller.account(spool, [], set(), interrupted_by="SIGTERM")
    assert [(r.nodeid, r.verdict) for r in spool.rows] == [
        ("t.py::test_mine", "pass"), ("t.py::test_w", "pass"), ("t.py::test_died", "error"),
        ("t.py::test_x", "not run")]
    checks = list(spool.checks())
    assert checks[1]["graphs"] == heavy("t.py::test_w").to_json()["graphs"]
    assert checks[2]["error"].splitlines()[-12:] == [f"line {i}" for i in range(28, 40)]
    controller.close()
    assert not tmp_path.exists()


def test_the_ledger_keeps_each_workers_timeline_numbers_only(tmp_path) -> None:
    worker = Ledger(str(tmp_path))
    worker.publish("timeline", {"worker": "gw1", "marks": {"start": 5.0, "collected": 7,
                                                           "odd": "7", "flag": True}})
    controller, spool = Ledger(str(tmp_path)), Spool(None)
    controller.collect(spool)
    assert controller.timelines == {"gw1": {"start": 5.0, "collected": 7.0}}
    assert not spool.rows


def test_a_spooled_result_removed_under_the_session_is_its_row_and_says_so(tmp_path) -> None:
    spool = Spool(str(tmp_path))
    spool.add(heavy("t.py::test_kept"))
    spool.add(heavy("t.py::test_lost", "fail"))
    (tmp_path / "check-000001.json").unlink()
    kept, lost = list(spool.checks())
    assert kept["graphs"] and not kept["problems"]
    assert lost["nodeid"] == "t.py::test_lost" and lost["verdict"] == "fail"
    assert lost["problems"][0].startswith("the full result was lost (")
    assert "check-000001.json: FileNotFoundError" in lost["problems"][0]


def test_a_worker_whose_result_cannot_be_written_names_the_disk_not_a_crash(
        tmp_path, monkeypatch) -> None:
    worker = Ledger(str(tmp_path))
    worker.publish("started", {"nodeid": "t.py::test_full"})

    def full_disk(path: Path, data: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ledger, "write_json_atomic", full_disk)
    with pytest.raises(Unpublished) as raised:
        worker.publish("result", heavy("t.py::test_full").to_json())
    monkeypatch.undo()
    # the worker's test fails with that line; the controller's account quotes it
    controller, spool = Ledger(str(tmp_path)), Spool(None)
    controller.failed_report("t.py::test_full", f"Traceback ...\nE   {raised.value}\n")
    controller.collect(spool)
    controller.account(spool, [], set(), interrupted_by=None)
    (row,) = spool.rows
    assert row.verdict == "error" and row.error.startswith(UNPUBLISHED), row.error
    assert "out of memory" not in row.error and str(tmp_path) in row.error
    assert "the disk is full" in row.error
    # a check whose very start could not be published is told the same
    controller, spool = Ledger(None), Spool(None)
    controller.failed_report("t.py::test_unstarted", f"E   {raised.value}\n")
    controller.account(spool, [], set(), interrupted_by=None)
    assert [(r.nodeid, r.verdict) for r in spool.rows] == [("t.py::test_unstarted", "error")]
