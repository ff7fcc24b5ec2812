"""Checks handed out longest first (controller/order.py) where earlier times are known:
the store's times.json (history/times.py, written as each check ends) or a report given
as --compile-cache-shard-times. Only checks move, among their own places."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List

import pytest

from pytest_compilecache.controller.order import longest_first
from pytest_compilecache.history import times


def _order(items: List[str], t: dict) -> List[str]:
    items = list(items)
    longest_first(items, lambda i: i.startswith("c"), lambda i: i, t)
    return items


def test_checks_move_longest_first_among_their_places() -> None:
    items = ["c1", "plain", "c2", "c3", "other", "c4"]
    assert _order(items, {"c1": 5, "c2": 50, "c3": 20, "c4": 1}) == \
        ["c2", "plain", "c3", "c1", "other", "c4"]
    # an unknown check costs the median of the known; ties keep collection order
    assert _order(items, {"c1": 5, "c3": 20, "c4": 1}) == ["c3", "plain", "c1", "c2", "other", "c4"]
    assert _order(items, {}) == items


def test_the_store_keeps_each_checks_last_time(tmp_path: Path) -> None:
    times.record(tmp_path, "t.py::a", "local", 30.0)
    times.record(tmp_path, "t.py::a", "mega", 12.5)  # one check through two paths: both
    times.record(tmp_path, "t.py::b", "local", 4.0)
    times.record(tmp_path, "t.py::b", "local", 6.0)  # the last run replaces
    assert times.read(tmp_path) == {"t.py::a": 42.5, "t.py::b": 6.0}
    assert times.process_seconds({"cold_process_s": 20.0, "warm_process_s": 5.5,
                                  "cold_s": 9.0, "cold_peak_rss_mb": 900}) == 25.5
    (tmp_path / "times.json").write_text("[" * 100_000)  # damaged: no times, no error
    assert times.read(tmp_path) == {}
    times.record(tmp_path, "t.py::c", "local", 1.0)  # and the next run starts it anew
    assert times.read(tmp_path) == {"t.py::c": 1.0}
    assert (tmp_path / ".gitignore").read_text().endswith("*\n")  # never makes a tree dirty


TESTS = """
import pytest

@pytest.mark.compile_cache
def test_small():
    pass

def test_plain():
    pass

@pytest.mark.compile_cache
def test_large():
    pass

@pytest.mark.compile_cache
def test_medium():
    pass
"""


def _collected(pytester: pytest.Pytester, *args: str) -> List[str]:
    res = pytester.runpytest_subprocess("--collect-only", "-q", "--compile-cache-check",
                                        "--compile-cache-store=store", *args)
    return [line.split("::")[-1] for line in res.outlines if "::" in line]


def test_a_session_orders_its_checks_by_the_stores_times(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_models=TESTS)
    assert _collected(pytester) == ["test_small", "test_plain", "test_large", "test_medium"]
    store = pytester.path / "store"
    for name, secs in (("test_small", 3.0), ("test_large", 60.0), ("test_medium", 20.0)):
        times.record(store, f"test_models.py::{name}", "local", secs)
    assert _collected(pytester) == ["test_large", "test_plain", "test_medium", "test_small"]
    # a report given for the shards' balance orders them too, over the store
    report = pytester.path / "report.json"
    report.write_text(json.dumps({
        "schema": "pytest-compilecache/report", "schema_version": 4, "checks": [
            {"nodeid": "test_models.py::test_small", "verdict": "pass",
             "timings": {"cold_process_s": 90.0}},
            {"nodeid": "test_models.py::test_medium", "verdict": "pass",
             "timings": {"cold_process_s": 1.0}}]}))
    assert _collected(pytester, f"--compile-cache-shard-times={report}") == \
        ["test_small", "test_plain", "test_large", "test_medium"]
    # a file that is no report is a usage error naming it, before any check runs
    report.write_text("{}")
    res = pytester.runpytest_subprocess("--collect-only", "-q", "--compile-cache-check",
                                        f"--compile-cache-shard-times={report}")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--compile-cache-shard-times: *report.json: not a "
                              "pytest-compilecache report*"])


# -- under pytest-xdist's --dist load: its real scheduler, run on simulated time ----------
class _Node:
    """What LoadScheduling sends to: a worker that runs its tests one after another."""

    def __init__(self, name: str) -> None:
        self.gateway = type("Gateway", (), {"id": name})()
        self.queue: List[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: List[int]) -> None:
        self.queue.extend(indices)

    def send_runtest_all(self) -> None:  # not used by load scheduling's start
        raise AssertionError

    def shutdown(self) -> None:
        self.shutting_down = True


def _makespan(order: List[str], seconds: dict, workers: int) -> float:
    """The session's wall time: xdist's LoadScheduling hands `order` out to `workers`
    workers, each running its tests in turn, told of each completion as xdist is."""
    from xdist.scheduler.load import LoadScheduling

    options = {"maxschedchunk": None, "tx": ["popen"] * workers, "numprocesses": None,
               "dist": "load"}
    config = type("Config", (), {"getoption": lambda self, name, default=None: options.get(
        name, default), "getvalue": lambda self, name: options.get(name)})()
    sched = LoadScheduling(config)
    nodes = [_Node(f"gw{i}") for i in range(workers)]
    for node in nodes:
        sched.add_node(node)
        sched.add_node_collection(node, order)
    sched.schedule()
    clock = {node: 0.0 for node in nodes}
    while any(node.queue for node in nodes):
        node = min((n for n in nodes if n.queue), key=lambda n: clock[n])
        index = node.queue.pop(0)
        clock[node] += seconds[order[index]]
        sched.mark_test_complete(node, index)
    return max(clock.values())


@pytest.mark.parametrize("workers", [2, 3, 4, 8])
def test_under_dist_load_the_longest_checks_start_on_different_workers(workers: int) -> None:
    """The sharding benchmark's eight models on 4 GPUs: handed out plain longest first,
    xdist's first chunk gave one worker the two longest (4x1: 113.9 s against 273.6 s
    on one GPU, 0.60 per GPU). Dealt across the workers no case is longer, and four
    workers finish with the longest pair. Where the first chunks are not every test,
    the order stays longest first (the rest go to whichever worker runs low)."""
    pytest.importorskip("xdist")
    seconds = {"bert": 52.0, "mobilenet": 50.0, "deit": 40.0, "resnet18": 30.0,
               "vit": 25.0, "gpt2": 24.0, "effnet": 20.0, "resnet50": 16.0}
    longest = sorted(seconds, key=lambda k: -seconds[k])
    plain = list(longest)
    dealt = list(longest)
    longest_first(dealt, lambda i: True, lambda i: i, seconds, workers)
    assert sorted(dealt) == sorted(plain)
    assert _makespan(dealt, seconds, workers) <= _makespan(plain, seconds, workers)
    if workers == 4:
        assert _makespan(plain, seconds, 4) == 102.0  # bert then mobilenet on one worker
        assert _makespan(dealt, seconds, 4) == 70.0  # mobilenet + effnet, the longest pair
    many = {f"m{i}": float(100 - 3 * i) for i in range(30)}  # more than two per worker
    order = sorted(many, key=lambda k: -many[k])
    laid = list(order)
    longest_first(laid, lambda i: True, lambda i: i, many, workers)
    assert laid == order  # xdist hands the rest to whichever worker runs low


def test_a_collection_with_other_tests_is_only_put_longest_first() -> None:
    items = ["c1", "plain", "c2", "c3", "c4"]
    laid = list(items)
    longest_first(laid, lambda i: i.startswith("c"), lambda i: i,
                  {"c1": 5, "c2": 50, "c3": 20, "c4": 1}, load_nodes=4)
    assert laid == ["c2", "plain", "c3", "c1", "c4"]  # xdist's chunks hold the other test
