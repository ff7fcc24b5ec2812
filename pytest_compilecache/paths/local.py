"""The local restart (--compile-cache-via=local, the default): the same machine restarts
over the same cache directories, cold then warm."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional, Tuple

from pytest_compilecache import files as fs
from pytest_compilecache.judge.verdict import judge
from pytest_compilecache.model import CheckResult
from pytest_compilecache.paths.base import PhasePlan, Records, Snapshots, WarmStartPath


class LocalRestart(WarmStartPath):
    """Cold, then warm over the same cache directories."""
    name = via = "local"
    summary = "local (restart over the same cache dirs)"
    phases: Tuple[PhasePlan, ...] = (PhasePlan("cold"), PhasePlan("warm"))
    cold_is_other_code = False
    storable = True

    def judge(self, nodeid: str, recs: Records, snaps: Snapshots,
              timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        return judge(nodeid, recs["cold"], recs["warm"], snaps["cold"],
                     fs.added(snaps["cold"], snaps["warm"]), timings, triton_dir,
                     cold_is_other_code=self.cold_is_other_code)
