"""Device slots under xdist, shards across machines, and a worker killed while it holds
a slot. Real sessions on CPU (slots = cores / threads per check); the shard and merge
arithmetic is also checked on its own."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import run_repo
from pytest_compilecache.render import shard
from pytest_compilecache.controller.gpus import Slot, SlotPool, cpu_slots, slots_for, visible_gpus

THREE = '''
import pytest
import torch

from pytest_compilecache import ModelCase


@pytest.fixture
def case():
    # one addmm, no generated C++ kernel: the cheapest real compile; what is checked here
    # is the session's sharding and slot leases, not a layer
    return ModelCase(torch.nn.Linear(16, 4), example_inputs=(torch.randn(4, 16),))


@pytest.mark.compile_cache
@pytest.mark.parametrize("n", range(3))
def test_mlp(case, n):
    ...
'''

KILLER = '''
import os
import signal

import pytest
import torch

from pytest_compilecache import ModelCase


def launcher():
    """The phase's launcher: its parent, or the parent of the preloaded interpreter
    that forked it."""
    ppid = os.getppid()
    with open(f"/proc/{ppid}/cmdline", "rb") as f:
        if b"pytest_compilecache.launch.forkserver" in f.read():
            with open(f"/proc/{ppid}/stat") as g:
                ppid = int(g.read().rsplit(")", 1)[1].split()[1])
    return ppid


@pytest.mark.compile_cache
def test_kills_its_worker(compile_cache):
    """The phase child kills the xdist worker that holds the slot lease."""
    os.kill(launcher(), signal.SIGKILL)


@pytest.fixture
def case():
    # one addmm, no generated C++ kernel: the cheapest real compile; what is checked here
    # is the session's sharding and slot leases, not a layer
    return ModelCase(torch.nn.Linear(16, 4), example_inputs=(torch.randn(4, 16),))


@pytest.mark.compile_cache
def test_survivor(case):
    ...
'''


def _overlaps(leases):
    by_slot = {}
    for lease in leases:
        by_slot.setdefault(lease["slot"], []).append((lease["acquired"], lease["released"]))
    for spans in by_slot.values():
        spans.sort()
        for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
            if b0 < a1:
                return True
    return False


@pytest.mark.slow
def test_shards_under_xdist_cover_every_check_once_with_exclusive_slots(tmp_path):
    reports = []
    for i, workers in ((1, ("-n", "2")), (2, ())):  # the second shard's one check: no xdist
        run = run_repo(tmp_path / "repo", {"test_three.py": THREE}, *workers,
                       "--compile-cache-manifest-only", "--compile-cache-threads=2",
                       f"--compile-cache-shard={i}/2")
        assert run.ret == 0, run.out[-3000:]
        assert len(run.report["checks"]) == 3 - i, run.out[-3000:]
        reports.append(run.report)
        leases = [lease for c in run.report["checks"] for lease in c["leases"]]
        # 2 cores / 2 threads per check = one CPU slot, shared by both workers
        assert {lease["slot"] for lease in leases} == {"cpu#0"}
        assert not _overlaps(leases), leases
        (tmp_path / f"r{i}.json").write_text(json.dumps(run.report))
    ids = [c["nodeid"] for r in reports for c in r["checks"]]
    assert sorted(ids) == sorted(f"test_three.py::test_mlp[{n}]" for n in range(3))
    proc = subprocess.run([sys.executable, "-m", "pytest_compilecache", "merge",
                           str(tmp_path / "r1.json"), str(tmp_path / "r2.json"),
                           "-o", str(tmp_path / "all.json")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    merged = json.loads((tmp_path / "all.json").read_text())
    assert [c["nodeid"] for c in merged["checks"]] == sorted(ids)
    assert merged["summary"]["recorded"] == 3 and len(merged["merged_from"]) == 2


@pytest.mark.slow
def test_a_worker_killed_while_holding_a_slot_does_not_block_the_session(tmp_path):
    run = run_repo(tmp_path / "repo", {"test_kill.py": KILLER}, "-n", "2",
                   "--compile-cache-threads=2", timeout=600)
    assert run.ret == 1, run.out[-3000:]
    assert "crashed" in run.out  # xdist reports the killed worker's check
    assert run.check("test_survivor")["verdict"] == "pass", run.out[-3000:]
    killed = run.check("test_kills_its_worker")  # in the report all the same, as an error
    assert killed["verdict"] == "error" and "died without a result" in killed["error"]


def test_shard_slices_partition_the_checks():
    ids = [f"t.py::test_{i}" for i in range(11)]
    times = {n: float(i % 4 + 1) for i, n in enumerate(ids[:8])}  # 3 checks without a time
    for count in (1, 2, 3, 5):
        for t in (None, times):
            parts = [shard.select(ids, i, count, t) for i in range(1, count + 1)]
            assert sorted(n for p in parts for n in p) == sorted(ids)
    loads = [sum(times.get(n, 2.0) for n in shard.select(ids, i, 2, times)) for i in (1, 2)]
    assert abs(loads[0] - loads[1]) <= 1.0  # balanced by time, not by count


def test_slots_and_gpu_ids_from_the_environment():
    assert [s.name for s in slots_for(["0", "1"], 2)] == ["0#0", "1#0", "0#1", "1#1"]
    assert Slot("3", 0).env() == {"CUDA_VISIBLE_DEVICES": "3"} and Slot("cpu", 0).env() == {}
    assert len(cpu_slots(16, 4)) == 4 and len(cpu_slots(2, 8)) == 1
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,5"}) == ["2", "5"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []


def test_a_busy_slot_times_out_with_the_holder_named(tmp_path):
    pool = SlotPool(tmp_path / "locks", [Slot("cpu", 0)], timeout=0.5, poll_s=0.05)
    with pool.lease("tests/a.py::test_a [cold]"):
        other = SlotPool(tmp_path / "locks", [Slot("cpu", 0)], timeout=0.5, poll_s=0.05)
        with pytest.raises(Exception) as e:
            with other.lease("tests/b.py::test_b [cold]"):
                pass
    assert "tests/a.py::test_a [cold]" in str(e.value) and "--compile-cache-lease-timeout" in str(e.value)
    assert oct((tmp_path / "locks").stat().st_mode & 0o777) == "0o700"
    with pool.lease("again"):  # released after the block
        pass
