"""What a check runs: which phase processes, with which cache state between them, and
which rule judges their records. One Scenario per kind, picked from a registry (the way
pytest-xdist picks a scheduler), so a new way to reach a warm start (a portable cache, a
compiled artifact) arrives as a new class here, not as another flag in the session.

pytest-free: the session runs the phases a scenario plans, in one private cache root,
and hands the records back to it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Type

from pytest_compilecache import files as fs
from pytest_compilecache.verdict import CheckResult, judge, recorded

Records = Dict[str, Dict[str, Any]]     # phase name -> what its child recorded
Snapshots = Dict[str, fs.Snapshot]      # phase name -> the cache root's files after it


@dataclass(frozen=True)
class PhasePlan:
    name: str                  # the child's phase: its spec, log and record files
    at_baseline: bool = False  # run in the baseline's worktree (another commit's code)


class Scenario:
    """A plan of phases and the rule that judges them."""
    name = ""
    phases: Tuple[PhasePlan, ...] = ()
    # the first phase's keys go to the manifest store, the repeat run and the baseline
    # comparison (not when that phase ran another commit's code)
    records_keys = True

    def judge(self, nodeid: str, recs: Records, snaps: Snapshots,
              timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        raise NotImplementedError


class LocalRestart(Scenario):
    """The same machine restarts over the same cache directories: cold, then warm."""
    name = "local"
    phases = (PhasePlan("cold"), PhasePlan("warm"))
    cold_is_other_code = False

    def judge(self, nodeid: str, recs: Records, snaps: Snapshots,
              timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        return judge(nodeid, recs["cold"], recs["warm"], snaps["cold"],
                     fs.added(snaps["cold"], snaps["warm"]), timings, triton_dir,
                     cold_is_other_code=self.cold_is_other_code)


class Deploy(LocalRestart):
    """The caches a baseline commit built, deployed under this commit's code: the cold
    phase runs in the baseline's worktree, so its numbers may legitimately differ."""
    name = "deploy"
    phases = (PhasePlan("cold", at_baseline=True), PhasePlan("warm"))
    records_keys = False
    cold_is_other_code = True


class RecordKeys(Scenario):
    """Cold only, to record the key manifest (baselines, bisect): no verdict."""
    name = "record"
    phases = (PhasePlan("cold"),)

    def judge(self, nodeid: str, recs: Records, snaps: Snapshots,
              timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        return recorded(nodeid, recs["cold"], timings)


REGISTRY: Dict[str, Type[Scenario]] = {s.name: s for s in (LocalRestart, Deploy, RecordKeys)}


def for_settings(settings: Any) -> Scenario:
    """The scenario the options ask for (one per session today)."""
    if settings.manifest_only:
        return REGISTRY["record"]()
    if settings.baseline_warm:
        return REGISTRY["deploy"]()
    return REGISTRY["local"]()
