"""The ranks of one job over one cache (`compile_cache(ranks=N)`, --compile-cache-ranks):
each phase runs as N processes started together, as torchrun starts a node's ranks
(controller/fleet.py starts them, child/ranks.py makes the process group in each):
cold over one fresh root the ranks share, as a node's ranks share its cache dir, then
warm over it; then `private`, each rank over a fresh root of its own: what rank r's own
compile gives, the reference a warm rank that loaded another rank's entry is held to
(judge/ranks.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional, Tuple

from pytest_compilecache.judge.ranks import judge_ranks
from pytest_compilecache.model import CheckResult
from pytest_compilecache.paths.base import PhasePlan, Records, Snapshots
from pytest_compilecache.paths.fleet import FleetRestart
from pytest_compilecache.wire import phase_records


class RankedRestart(FleetRestart):
    """Cold and warm over the ranks' shared root, then each rank over its own."""
    name = via = "ranks"
    noun = "rank"
    phases: Tuple[PhasePlan, ...] = (
        PhasePlan("cold", keeps_outputs=True, fleet=True, process_group=True),
        PhasePlan("warm", keeps_outputs=True, compare_with="cold", fleet=True,
                  process_group=True),
        PhasePlan("private", fresh_root=True, compare_with="warm", fleet=True,
                  process_group=True))

    @property
    def ranks(self) -> int:
        return self.size

    def judge(self, nodeid: str, recs: Records, snaps: Snapshots,
              timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        return judge_ranks(nodeid, phase_records(recs), snaps, timings, triton_dir, self.ranks)
