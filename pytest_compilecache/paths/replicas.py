"""Replicas of one model over one cache (`compile_cache(replicas=N)`,
--compile-cache-replicas): the fleet that started this project, N single-process
inference servers, one per GPU, warming from one cache dir built once. Cold: one
process (replica 0) over one fresh root; warm: N processes started at the same time
over that root, no process group, each on its own GPU under CUDA (leased like every
phase's GPUs, each seeing only its own, as cuda:0: `layout`); then `private`, each
replica over a fresh root of its own: its own compile on its GPU, the reference a
replica that loaded another's entry is held to (judge/replicas.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional, Tuple

from pytest_compilecache.judge.replicas import REPLICAS, judge_replicas
from pytest_compilecache.model import CheckResult
from pytest_compilecache.paths.base import PhasePlan, Records, Snapshots
from pytest_compilecache.paths.fleet import FleetRestart
from pytest_compilecache.wire import phase_records


class ReplicatedRestart(FleetRestart):
    """Cold as one replica, warm as N at once over its root, then each over its own."""
    name = via = "replicas"
    noun = "replica"
    fleet = REPLICAS
    layout = "pinned"  # one server per GPU: each replica sees its own as cuda:0
    phases: Tuple[PhasePlan, ...] = (
        PhasePlan("cold", keeps_outputs=True),
        PhasePlan("warm", keeps_outputs=True, compare_with="cold", fleet=True),
        PhasePlan("private", fresh_root=True, compare_with="warm", fleet=True))

    def judge(self, nodeid: str, recs: Records, snaps: Snapshots,
              timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        return judge_replicas(nodeid, phase_records(recs), snaps, timings, triton_dir,
                              self.size)
