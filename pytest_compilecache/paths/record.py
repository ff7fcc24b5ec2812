"""Recording keys (--compile-cache-manifest-only): a cold phase only, no verdict."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional

from pytest_compilecache.judge.verdict import recorded
from pytest_compilecache.model import CheckResult
from pytest_compilecache.paths.base import PhasePlan, Records, Snapshots, WarmStartPath


class RecordKeys(WarmStartPath):
    """Cold only, to record the key manifest (baselines, bisect): no verdict."""
    name = "record"
    selectable = False
    phases = (PhasePlan("cold"),)
    compares_outputs = False  # a recording has no verdict: no eager or float64 re-run
    runs_ahead = True  # and times nothing: its phases may share the machine
    keeps_failed_roots = False  # it fails on drift alone, which the report says whole

    def judge(self, nodeid: str, recs: Records, snaps: Snapshots,
              timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        return recorded(nodeid, recs["cold"], timings)
