"""The local restart (--compile-cache-via=local, the default): the same machine restarts
over the same cache directories, cold then warm; then, where the test drew from Python's
`random` or numpy's global generator, once more with those seeded otherwise (a
production restart's draws: child/replay.py says why, judge/reseeded.py judges it)."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional, Tuple

from pytest_compilecache import files as fs
from pytest_compilecache.judge.reseeded import judge_reseeded
from pytest_compilecache.judge.verdict import judge
from pytest_compilecache.model import CheckResult
from pytest_compilecache.paths.base import PhasePlan, Records, Snapshots, WarmStartPath
from pytest_compilecache.wire import PhaseRecord

# Python's random and numpy's in the reseeded restart (the judged phases': 0)
RESEED = 1


class LocalRestart(WarmStartPath):
    """Cold, then warm over the same cache directories (then the reseeded restart)."""
    name = via = "local"
    summary = "local (restart over the same cache dirs)"
    phases: Tuple[PhasePlan, ...] = (PhasePlan("cold"), PhasePlan("warm"),
                                     PhasePlan("reseeded", python_seed=RESEED))
    cold_is_other_code = False
    storable = True

    def judge(self, nodeid: str, recs: Records, snaps: Snapshots,
              timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        res = judge(nodeid, recs["cold"], recs["warm"], snaps["cold"],
                    fs.added(snaps["cold"], snaps["warm"]), timings, triton_dir,
                    cold_is_other_code=self.cold_is_other_code)
        if "reseeded" in recs:
            judge_reseeded(res, PhaseRecord.from_json(recs["cold"]),
                           PhaseRecord.from_json(recs["reseeded"]))
        return res.finalize()
