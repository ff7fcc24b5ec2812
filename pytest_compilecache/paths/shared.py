"""Variants over one cache (--compile-cache-share-variants): the local restart, then a
turn over the cache root that the variants of the test function share, as a service
that serves them all from one cache dir fills and reads it. The turn's outputs must be
what the variant's own private cold run computed; an entry another variant wrote that
changes them is a false hit (judge/false_hits.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional, Tuple

from pytest_compilecache.judge.false_hits import judge_shared
from pytest_compilecache.model import WARM_START_KEY, CheckResult
from pytest_compilecache.wire import phase_records
from pytest_compilecache.paths.base import PhasePlan, Records, Snapshots
from pytest_compilecache.paths.local import LocalRestart


class SharedVariants(LocalRestart):
    """Cold and warm in the check's private root, then the shared turn, compared with
    the private cold run. It stands in for the local restart (same phases, one more),
    so the turn costs one phase per variant."""
    name = via = "shared"
    summary = ""  # not a --compile-cache-via value: --compile-cache-share-variants
    selectable = False
    storable = False  # its warm run is another GPU's or a shared root's: not a plain restart
    phases: Tuple[PhasePlan, ...] = (
        PhasePlan("cold"), PhasePlan("warm"),
        PhasePlan("shared", shared_root=True, compare_with="cold"))

    def judge(self, nodeid: str, recs: Records, snaps: Snapshots,
              timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        phases = phase_records(recs)
        res = super().judge(nodeid, {p: phases[p] for p in ("cold", "warm") if p in phases},
                            snaps, timings, triton_dir)
        res.via = self.via
        # its column in the warm start by path is the turn's (None: no turn ran)
        res.timings[WARM_START_KEY] = timings.get("shared_s") if "shared" in phases else None
        if "shared" in phases:
            judge_shared(res, phases["shared"])
        elif "warm" in phases:
            res.notes.append("shared cache: no other variant of this test function is checked "
                             "in this session, so there is nothing to share")
        return res.finalize()
