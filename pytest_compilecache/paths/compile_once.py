"""Compile once, load on N (`compile_cache(compile_once=N)`, --compile-cache-compile-once):
one process compiles a distributed program for N ranks, and the N ranks of the real job
load it, as torchtitan's experiments/graph_trainer/precompile_main.py precompiles with a
fake process group and compile_on_one_rank, then every rank of the torchrun job loads
the artifact. Cold: one process over one fresh root, in a fake process group of world
size N as its rank 0 (child/once.py), its outputs kept by no one; warm: the N ranks
started together over that root (env rendezvous, gloo on CPU, NCCL on CUDA); then
`private`, each rank over a fresh root of its own: its own compile, the reference its
warm outputs are held to (judge/once.py). compile_on_one_rank is on in every
process; where torch has none, the check is n/a, naming the version and the API
(child/once.missing)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from pytest_compilecache.judge.once import ONCE, judge_once
from pytest_compilecache.model import CheckResult
from pytest_compilecache.paths.base import PhasePlan, Records, Snapshots
from pytest_compilecache.paths.fleet import FleetRestart
from pytest_compilecache.terms import FAKE_WORLD_ENV, ONCE_ENV
from pytest_compilecache.wire import PhaseRecord, RecordLike, phase_records


class CompileOnceRestart(FleetRestart):
    """Cold as one process of a fake group of N, warm as the N ranks, then each alone."""
    name = via = "compile_once"
    noun = "rank"
    fleet = ONCE
    # the compiling process's outputs are a fake group's (its collectives move no data)
    # and rank 0's: no loader is held to them, each to its own fresh compile instead
    phases: Tuple[PhasePlan, ...] = (
        PhasePlan("cold"),
        PhasePlan("warm", keeps_outputs=True, fleet=True, process_group=True),
        PhasePlan("private", fresh_root=True, compare_with="warm", fleet=True,
                  process_group=True))

    def phase_env(self, plan: PhasePlan) -> Dict[str, str]:
        env = {**super().phase_env(plan), ONCE_ENV: "1"}
        if not plan.fleet:  # the one compiling process: its fake group's world size
            env[FAKE_WORLD_ENV] = str(self.size)
        return env

    def goes_on(self, rec: RecordLike) -> bool:
        """No loaders where the compiling process found no compile_on_one_rank."""
        return not PhaseRecord.from_json(rec).artifact.na

    def not_applicable(self, form: str, case: Any) -> Optional[str]:
        import torch

        from pytest_compilecache.child.once import coor_config, missing

        return missing(torch.__version__) if coor_config() is None else None

    def judge(self, nodeid: str, recs: Records, snaps: Snapshots,
              timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        return judge_once(nodeid, phase_records(recs), snaps, timings, triton_dir, self.size)
