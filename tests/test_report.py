"""The summary table's cells (terminal and job summary)."""
from __future__ import annotations

import json

from pytest_compilecache.render import lines as tx
from pytest_compilecache.model import CheckResult


def test_warm_over_cold_is_a_dash_where_nothing_was_compiled() -> None:
    # a test with no torch.compile: both phases take milliseconds
    idle = CheckResult(nodeid="t.py::test_plain", verdict="fail",
                       timings={"cold_s": 0.004, "warm_s": 0.028})
    assert tx.row_cells(idle)[1] == ("0.0", "0.0", "-")
    real = CheckResult(nodeid="t.py::test_mlp", verdict="pass",
                       timings={"cold_s": 17.0, "warm_s": 2.5})
    assert tx.row_cells(real)[1] == ("17.0", "2.5", "0.15")


def _session(n_pass: int) -> list:
    rows = [CheckResult(nodeid=f"t.py::test_ok[{i}]", verdict="pass", device="cpu")
            for i in range(n_pass)]
    rows.insert(3, CheckResult(nodeid="t.py::test_stale", verdict="fail", device="cpu"))
    rows.append(CheckResult(nodeid="t.py::test_crash", verdict="error", device="cpu"))
    rows.append(CheckResult(nodeid="t.py::test_na", verdict="n/a", via="aot", device="cpu",
                            notes=["the aot path cannot take a test body"]))
    return rows


def test_failures_come_first_and_every_check_is_listed_without_q() -> None:
    lines = tx.summary_lines(_session(5))
    names = [line.split()[0] for line in lines[1:9]]
    assert names[:2] == ["t.py::test_stale", "t.py::test_crash"], lines
    assert names[2:7] == [f"t.py::test_ok[{i}]" for i in range(5)]
    assert not any(line.startswith("... and") for line in lines)


def test_under_q_the_passes_fold_into_one_count() -> None:
    lines = tx.summary_lines(_session(200), quiet=True)
    assert [line.split()[0] for line in lines[1:4]] == [
        "t.py::test_stale", "t.py::test_crash", "t.py::test_na"], lines
    assert lines[3].startswith("t.py::test_na [via aot] n/a")
    assert "... and 200 more check(s): 200 passed (listed without -q)" in lines
    assert len(lines) < 15, lines  # not one line a check
    assert lines[-1].startswith("note: checks ran on CPU")


def test_a_passing_check_says_how_much_of_it_eager_judged() -> None:
    """The dropout training record (tests/data/records): eager judged 1 of its 5
    tensors, the other 4 change with the random seed; once in the summary, under the
    table, and in the check's own report. A check eager judged whole adds no line."""
    from test_judges import _check, load, rejudge

    dropout = _check("dropout_training")
    said = "1 of 5 tensors compared (4 change with the random seed)"
    assert tx.eager_coverage(dropout) == said
    lines = tx.summary_lines([dropout, _check("pass_mlp")])
    assert lines[3] == f"{dropout.label}: outputs: warm compiled vs eager: {said}"
    assert len([line for line in lines if "warm compiled vs eager" in line]) == 1
    # the session prints from the checks' summary rows (their results are spooled)
    assert tx.summary_lines([dropout.summary_row(), _check("pass_mlp").summary_row()]) \
        == lines
    assert any(line.startswith("  outputs: warm compiled vs eager (") and line.endswith(
        f"close; {said}") for line in tx.failure_lines(dropout))
    assert tx.eager_coverage(_check("pass_mlp")) == "its 1 tensor compared"
    # every tensor random (a training body whose loss and gradients all move with dropout)
    rec = load("dropout_training")
    eager = rec["recs"]["warm"]["compare_eager"]
    eager["random"] += [{**eager["random"][0], "name": n} for n in ("record:one",)]
    eager["compared"], eager["total"] = 0, 5
    rec["recs"]["cold"]["compare_eager"] = eager
    assert tx.eager_coverage(rejudge(rec)) == (
        "0 of 5 tensors compared: eager judged nothing (5 change with the random seed)")
    # under -q the passing checks fold, and so do their lines: counted
    quiet = tx.summary_lines([dropout, _check("pass_mlp")], quiet=True)
    assert "... of which 1 compared only part of their tensors with eager (listed without -q)" \
        in quiet and not any(line.startswith(dropout.label) for line in quiet)


def test_under_q_a_session_whose_checks_all_passed_prints_no_empty_table() -> None:
    rows = [CheckResult(nodeid=f"t.py::test_ok[{i}]", verdict="pass", device="cpu")
            for i in range(3)]
    lines = tx.summary_lines(rows, quiet=True)
    assert lines[0] == "... and 3 more check(s): 3 passed (listed without -q)", lines
    assert not any(line.startswith(("warm start by path", "check")) for line in lines), lines


def test_a_long_node_id_keeps_its_test_name_in_the_table() -> None:
    # issue 52: ids were cut from the left, so the table showed "…dels.py::test_mlp[cu"
    # with the directory gone and, for a long test name, the name's start gone too
    deep = ("tests/integration/very/deep/directory/of/models/transformers/"
            "test_transformer_models.py::test_decoder_warm")
    params = "t.py::test_" + "x" * 40 + "[cuda-bf16-" + "y" * 40 + "]"
    lines = tx.summary_lines([CheckResult(nodeid=deep, verdict="pass"),
                              CheckResult(nodeid=params, verdict="pass")])
    shown = [line.split(" ")[0] for line in lines[1:3]]
    assert all(len(s) <= 60 for s in shown), shown
    assert shown[0].startswith("tests/") and shown[0].endswith(
        "…/test_transformer_models.py::test_decoder_warm"), shown
    assert shown[1].startswith("test_xxxx") and shown[1].endswith("yyy]") and "…" in shown[1]


def test_a_recording_s_seconds_are_not_under_cold_s() -> None:
    # issue 52: a keys-only session's table put the recording time under `cold s`
    rec = CheckResult(nodeid="t.py::test_mlp", verdict="recorded",
                      timings={"cold_s": 0.01, "cold_process_s": 3.3})
    assert tx.row_cells(rec)[1] == ("-", "-", "-")
    lines = tx.summary_lines([rec.summary_row(), CheckResult(
        nodeid="t.py::test_b", verdict="recorded", timings={"cold_process_s": 1.0})])
    assert any(x.startswith("recorded: the keys of 2 check(s) in 4.3 s of phase processes")
               for x in lines), lines


def test_a_recording_that_drifted_keeps_its_seconds_out_of_cold_s() -> None:
    # the newcomer's walk of issue 52: a keys-only check failing on drift still
    # showed its recording's 3.9 s under `cold s` (a passing recording showed -)
    rec = CheckResult(nodeid="t.py::test_mlp", verdict="recorded",
                      timings={"cold_s": 3.9, "cold_process_s": 11.6})
    rec.finalize()
    rec.problems.append("cache keys drifted against main")
    row = rec.finalize().summary_row()
    assert row.verdict == "fail"
    assert tx.row_cells(row)[1] == ("-", "-", "-")
    lines = tx.summary_lines([row])
    assert any(x.startswith("recorded: the keys of 1 check(s) in 11.6 s")
               for x in lines), lines
    # and so does `show REPORT`, which rebuilds the result from the report's JSON
    shown = CheckResult.from_json(json.loads(json.dumps(rec.to_json())))
    assert (shown.verdict, shown.kind) == ("fail", "recorded")
    assert tx.row_cells(shown)[1] == ("-", "-", "-")


def test_the_shared_column_shows_the_turn_over_the_shared_cache_not_the_private_warm_run() -> None:
    # issue 52: the share-variants "warm start by path" table's `shared` column showed
    # the private warm runs' seconds, the local column's figure again
    local = CheckResult(nodeid="t.py::test_f[a]", verdict="pass", via="local",
                        timings={"warm_s": 2.0})
    turned = CheckResult(nodeid="t.py::test_f[a]", verdict="pass", via="shared",
                         timings={"warm_s": 2.0, "shared_s": 7.5, "warm_start_s": 7.5})
    alone = CheckResult(nodeid="t.py::test_g", verdict="pass", via="shared",
                        timings={"warm_s": 3.0, "warm_start_s": None})
    head, rows = tx.warm_start_by_path([local, turned.summary_row(), alone])
    assert head == ["check", "local", "shared"]
    assert rows[0] == ["t.py::test_f[a]", "2.0", "7.5"], rows
    assert rows[1] == ["t.py::test_g", "-", "-"], rows  # no other variant: no turn
