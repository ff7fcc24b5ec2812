"""The deploy scenario (--compile-cache-baseline-warm): the caches a baseline commit
built, started under this commit's code."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

from pytest_compilecache.judge.outputs import as_written, failed_names
from pytest_compilecache.model import CheckResult, PhaseRecord, RecordLike, phase_records
from pytest_compilecache.paths.base import PhasePlan, Records, Snapshots
from pytest_compilecache.paths.local import LocalRestart


class Deploy(LocalRestart):
    """The caches a baseline commit built, deployed under this commit's code: the cold
    phase runs in the baseline's worktree, so its numbers may legitimately differ, and
    a stale entry shows as warm compiled vs eager of this commit. Eager cannot judge a
    tensor that changes with the random seed (dropout): for those, and only when there
    are some, a third phase compiles this commit's code afresh on an empty cache, and
    the warm run must draw and compute what it does."""
    name = "deploy"
    summary = ""  # not a --compile-cache-via value: --compile-cache-baseline-warm
    selectable = False
    phases = (PhasePlan("cold", at_baseline=True), PhasePlan("warm", keeps_outputs=True),
              PhasePlan("fresh", fresh_root=True, compare_with="warm"))
    records_keys = False
    cold_is_other_code = True

    def goes_on(self, rec: RecordLike) -> bool:
        r = PhaseRecord.from_json(rec)
        return r.phase != "warm" or bool(random_tensors(r))

    def judge(self, nodeid: str, recs: Records, snaps: Snapshots,
              timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        phases = phase_records(recs)
        res = super().judge(nodeid, phases, snaps, timings, triton_dir)
        if "fresh" not in phases:
            return res
        cmp = phases["fresh"].compare_cold
        res.outputs["fresh_vs_warm"] = as_written(cmp, failed_names(cmp)) or {}
        n = len(random_tensors(phases["warm"]))
        if cmp is None:
            res.problems.append("outputs: the fresh compile of this commit's code made no "
                                "comparison with the warm run")
        elif not cmp.ok:
            first = cmp.mismatches[0]
            res.problems.append(
                f"outputs: the warm run (the baseline's caches under this commit's code) differs "
                f"from a fresh compile of this commit's code in {len(cmp.mismatches)} "
                f"tensor(s); first {first.name}: {first.message} - a stale cache "
                f"entry returns the baseline's numbers (a fresh head compile is the reference "
                f"here because {n} tensor(s) change with the random seed and eager cannot "
                f"judge them)")
        else:
            res.notes.append(f"{n} tensor(s) change with the random seed, which eager cannot "
                             f"judge: a fresh compile of this commit's code on an empty cache "
                             f"(an extra phase, run only for them) drew and computed what the "
                             f"warm run did ({cmp.mode})")
        return res.finalize()


def random_tensors(rec: RecordLike) -> List[str]:
    """The tensors a phase found to change with the random seed (`randomness`)."""
    cmp = PhaseRecord.from_json(rec).compare_eager
    return [r.name for r in cmp.random] if cmp is not None else []
