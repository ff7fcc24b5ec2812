"""Keys of two cold runs of the same code, and the store and report under concurrent
writers. The session test is real (xdist workers, tiny models on CPU Inductor); the
store and report tests hammer the real files from several processes."""
from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path

import pytest

from conftest import run_repo
from pytest_compilecache.history import manifest as mf
from pytest_compilecache.render import report
from pytest_compilecache.history.store import ManifestStore

JITTER = '''
import random

import pytest
import torch

from pytest_compilecache import ModelCase

JITTER = random.random()  # per process, like a value read from the clock


class Jittery(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(16, 16)

    def forward(self, x):
        return self.l1(x) + JITTER


@pytest.fixture
def jittery():
    return ModelCase(Jittery(), example_inputs=(torch.randn(4, 16),))


@pytest.fixture
def stable():
    # one addmm, no generated C++ kernel: the cheapest real compile; what is checked here
    # is the session's repeat run and store, not a layer
    return ModelCase(torch.nn.Linear(16, 4), example_inputs=(torch.randn(4, 16),))


@pytest.mark.compile_cache
def test_jittery(jittery):
    ...


@pytest.mark.compile_cache
def test_stable(stable):
    ...
'''


@pytest.mark.slow
def test_repeat_names_the_nondeterministic_component_and_workers_share_the_store(tmp_path):
    run = run_repo(tmp_path / "repo", {"test_keys.py": JITTER}, "-n", "2",
                   "--compile-cache-manifest-only", "--compile-cache-repeat")
    assert run.ret == 1, run.out[-3000:]
    jit, ok = run.check("test_jittery"), run.check("test_stable")
    assert jit["verdict"] == "fail" and jit["repeat"]["status"] == "nondeterministic"
    fx = [g for g in jit["repeat"]["graphs"] if g["graph"] == "fx_graph:0/0"][0]
    assert [c["component"] for c in fx["components"]] == ["gm"]
    assert "nondeterministic cache key" in run.out and "differing: gm" in run.out
    assert any(line.startswith("-    add = ") for line in fx["graph_code_diff"])
    assert ok["verdict"] == "recorded" and ok["repeat"]["status"] == "stable"
    # outside a git repository: commit "unknown", and both xdist workers' checks are kept
    assert run.report["commit"]["sha"] == "unknown"
    (stored,) = (tmp_path / "repo" / ".compilecache" / "manifests").glob("*/unknown.json")
    checks = json.loads(stored.read_text())["checks"]
    assert sorted(checks) == ["test_keys.py::test_jittery", "test_keys.py::test_stable"]
    # the workers wrote it; the controller's summary names it (issue 38: it did not)
    assert f"key manifest: {stored}" in run.out, run.out[-2000:]


ENV = {"torch": "2.13.0", "triton": None, "cuda": None, "python": "3.11", "device": "cpu",
       "device_name": None}


def _writer(args):
    root, i = args
    entry = {"verdict": "recorded", "graphs": {"fx_graph:0/0": {"key": f"f{i}", "components": []}}}
    for _ in range(5):  # repeated merges widen the window for a lost update
        ManifestStore(Path(root)).merge({"sha": "abc", "dirty": False}, ENV, {f"t.py::test_{i}": entry})


def test_store_merges_concurrent_writers_without_losing_one(tmp_path):
    with multiprocessing.get_context("spawn").Pool(6) as pool:
        pool.map(_writer, [(str(tmp_path), i) for i in range(12)])
    data = ManifestStore(tmp_path).load(mf.environment_id(ENV), "abc")
    assert sorted(data["checks"]) == sorted(f"t.py::test_{i}" for i in range(12))
    assert data["schema"] == mf.SCHEMA and data["environment"] == ENV
    assert oct((tmp_path / "locks").stat().st_mode & 0o777) == "0o700"


def _report(nodeid: str) -> dict:
    return {"schema": report.SCHEMA, "created": report.now(), "summary": {"pass": 1},
            "checks": [{"nodeid": nodeid, "verdict": "pass"}]}


def test_report_keeps_a_concurrent_sessions_checks_but_replaces_a_stale_report(tmp_path):
    path = str(tmp_path / "r.json")
    stale = dict(_report("a"), created="2000-01-01T00:00:00+00:00")
    report.write_report(path, stale)
    started = report.now()
    report.write_report(path, _report("b"), since=started)  # a stale report is replaced
    assert [c["nodeid"] for c in json.loads(Path(path).read_text())["checks"]] == ["b"]
    report.write_report(path, _report("c"), since=started)  # b's session ran alongside ours
    merged = json.loads(Path(path).read_text())
    assert sorted(c["nodeid"] for c in merged["checks"]) == ["b", "c"]
    assert merged["summary"]["pass"] == 2


def test_a_report_written_just_before_our_session_started_is_replaced(tmp_path):
    """Back-to-back sessions (shard 1 then shard 2 into one path) often share a second."""
    path = str(tmp_path / "r.json")
    report.write_report(path, _report("a"))  # the previous session, ending now
    time.sleep(0.01)
    started = report.now()
    report.write_report(path, _report("b"), since=started)
    assert [c["nodeid"] for c in json.loads(Path(path).read_text())["checks"]] == ["b"]
