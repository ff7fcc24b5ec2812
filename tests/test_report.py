"""The summary table's cells (terminal and job summary)."""
from __future__ import annotations

from pytest_compilecache.render import report
from pytest_compilecache.model import CheckResult


def test_warm_over_cold_is_a_dash_where_nothing_was_compiled() -> None:
    # a test with no torch.compile: both phases take milliseconds
    idle = CheckResult(nodeid="t.py::test_plain", verdict="fail",
                       timings={"cold_s": 0.004, "warm_s": 0.028})
    assert report.row_cells(idle)[1] == ("0.0", "0.0", "-")
    real = CheckResult(nodeid="t.py::test_mlp", verdict="pass",
                       timings={"cold_s": 17.0, "warm_s": 2.5})
    assert report.row_cells(real)[1] == ("17.0", "2.5", "0.15")
