"""The ranks of one job over one cache (`compile_cache(ranks=N)`, --compile-cache-ranks):
each phase runs as N processes started together, as torchrun starts a node's ranks
(controller/ranks.py starts them, child/ranks.py makes the process group in each):
cold over one fresh root the ranks share, as a node's ranks share its cache dir, then
warm over it; then `private`, each rank over a fresh root of its own: what rank r's own
compile gives, the reference a warm rank that loaded another rank's entry is held to
(judge/ranks.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from pytest_compilecache.judge.ranks import judge_ranks
from pytest_compilecache.model import CheckResult
from pytest_compilecache.paths.base import PhasePlan, Records, Snapshots
from pytest_compilecache.paths.local import LocalRestart
from pytest_compilecache.wire import phase_records


class RankedRestart(LocalRestart):
    """Cold and warm over the ranks' shared root, then each rank over its own."""
    name = via = "ranks"
    summary = ""  # not a --compile-cache-via value: compile_cache(ranks=N)
    selectable = False
    storable = False  # its root holds every rank's entries: not one process's restart
    records_keys = False  # its phases are per rank (cold.r0 ...): no one cold run's keys
    phases: Tuple[PhasePlan, ...] = (
        PhasePlan("cold", keeps_outputs=True),
        PhasePlan("warm", keeps_outputs=True, compare_with="cold"),
        PhasePlan("private", fresh_root=True, compare_with="warm"))

    def __init__(self, ranks: int = 2) -> None:
        self.ranks = ranks

    @classmethod
    def from_settings(cls, settings: Any) -> "RankedRestart":
        return cls(int(getattr(settings, "ranks", 2) or 2))

    def judge(self, nodeid: str, recs: Records, snaps: Snapshots,
              timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        return judge_ranks(nodeid, phase_records(recs), snaps, timings, triton_dir, self.ranks)

