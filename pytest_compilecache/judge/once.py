"""The rules of a compile-once check (paths/compile_once.py): one process compiled the
program for N ranks (a fake process group, compile_on_one_rank), and the N ranks of
the real job loaded what it wrote. Each rank is judged by the ranks' rules
(judge/ranks.py) against that one compile: its layers over the compiling process's
cold records and its own warm ones, its outputs against the compiling process's and
eager; and since every entry a rank loads is the compiling process's, each rank's warm
outputs against its own fresh compile over a root no other process writes: a
difference is a false hit naming the entry, the compiling process as its writer, the
loading rank, what the key holds and the fix. Where torch has no compile_on_one_rank
the compiling process says so, and the check is n/a with torch's version and the API.
Pure: no torch, no pytest.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from pytest_compilecache.judge.outputs import NO_COLD
from pytest_compilecache.judge.ranks import Fleet, judge_ranks, rank_phase
from pytest_compilecache.model import CheckResult
from pytest_compilecache.wire import PhaseRecord

ONCE = Fleet(
    wrote="wrote for every rank (rank 0 of a fake process group, compile_on_one_rank)",
    fix=("make what the compile reads of the rank a graph input (compile_on_one_rank "
         "does so for DeviceMesh coordinates, process groups and, in torch 2.15, the "
         "device; a custom pass or a Python value that reads dist.get_rank() is baked "
         "in), or let each rank compile its own (no compile once)"),
    unkeyed="the rank is not in it: one compile serves every rank", compiler=True)


def judge_once(nodeid: str, phases: Mapping[str, PhaseRecord], snaps: Mapping[str, Any],
               timings: Dict[str, Optional[float]], triton_dir: Optional[Path],
               n: int) -> CheckResult:
    """Each loading rank's own result, under the check's row; n/a without the API."""
    cold = phases[rank_phase("cold", 0)]
    if cold.artifact.na:
        return CheckResult(nodeid=nodeid, verdict="n/a", via="compile_once",
                           versions=cold.versions, device=cold.device, timings=timings,
                           notes=[f"compile_once: {cold.artifact.na}"])
    res = judge_ranks(nodeid, phases, snaps, timings, triton_dir, n, "compile_once", ONCE)
    return held_to_own_compile(res)


def held_to_own_compile(res: CheckResult) -> CheckResult:
    """No loader is compared with the compiling process's outputs (a fake group's,
    rank 0's: paths/compile_once.py keeps none), so none is faulted for the comparison
    it did not make; each is held to its own compile (the false hit's rule) instead."""
    res.problems = [p for p in res.problems if not p.endswith(NO_COLD)]
    for row in res.ranks:
        row["problems"] = [p for p in row["problems"] if p != NO_COLD]
        if (row["verdict"] == "fail" and not row["problems"] and
                (row["outputs"].get("private_vs_warm") or {}).get("ok", True)):
            row["verdict"] = "pass"
    return res.finalize()
