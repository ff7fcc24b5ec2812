"""The deploy scenario (--compile-cache-baseline-warm): the caches a baseline commit
built, started under this commit's code."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

from pytest_compilecache.judge.outputs import fresh_reference, served
from pytest_compilecache.model import CheckResult
from pytest_compilecache.wire import PhaseRecord, RecordLike, phase_records
from pytest_compilecache.paths.base import PhasePlan, Records, Snapshots
from pytest_compilecache.paths.local import LocalRestart


class Deploy(LocalRestart):
    """The caches a baseline commit built, deployed under this commit's code: the cold
    phase runs in the baseline's worktree (or is the one a session at the baseline kept
    in the store with its caches), so its numbers may legitimately differ, and
    a stale entry shows against this commit's code. Compiled vs eager catches a stale
    entry only where it is off by more than rounding (assert_close's atol hides a
    relative error of 5e-4 in gradients of size 1e-2), and not at all in a tensor that
    changes with the random seed (dropout). So a third phase always compiles this
    commit's code afresh on an empty cache, same seed: the reference a stale entry
    cannot hide from, for the warm run must compute and draw what it does."""
    accepts_drift = True
    name = "deploy"
    summary = ""  # not a --compile-cache-via value: --compile-cache-baseline-warm
    selectable = False
    phases = (PhasePlan("cold", at_baseline=True, from_store=True),
              PhasePlan("warm", keeps_outputs=True),
              PhasePlan("fresh", fresh_root=True, compare_with="warm"))
    records_keys = False
    cold_is_other_code = True
    storable = False

    def judge(self, nodeid: str, recs: Records, snaps: Snapshots,
              timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        phases = phase_records(recs)
        res = super().judge(nodeid, phases, snaps, timings, triton_dir)
        fresh = phases.get("fresh")
        cmp = fresh_reference(res, fresh, "the fresh compile of this commit's code")
        n = len(random_tensors(phases["warm"]))
        seeded = (f"; {n} tensor(s) change with the random seed, which eager cannot judge "
                  f"at all" if n else "")
        if cmp is not None and not cmp.ok:
            first = cmp.mismatches[0]
            res.problems.append(
                f"outputs: the warm run (the baseline's caches under this commit's code) differs "
                f"from a fresh compile of this commit's code in {len(cmp.mismatches)} "
                f"tensor(s); first {first.name}: {first.message} - a stale cache entry "
                f"returns the baseline's numbers{served(res, first.name)} (the fresh "
                f"compile, on an empty cache with the same seed, is the reference a stale "
                f"entry cannot hide from, as it can within compiled vs eager's "
                f"tolerance{seeded})")
        elif cmp is not None:
            near_zero = sum(1 for v in cmp.within_noise if v.no_reference)
            noise = (f", {len(cmp.within_noise)} within arithmetic noise" if cmp.within_noise
                     else "") + (f" ({near_zero} near zero, where the float64 run is no "
                                 f"reference: within assert_close's defaults too)"
                                 if near_zero else "")
            res.notes.append(f"a fresh compile of this commit's code on an empty cache, the "
                             f"reference a stale entry cannot hide from, computed what the "
                             f"warm run did ({cmp.mode}: {cmp.raw.get('compared')} "
                             f"compared{noise}){seeded}")
        return res.finalize()


def random_tensors(rec: RecordLike) -> List[str]:
    """The tensors a phase found to change with the random seed (`randomness`)."""
    cmp = PhaseRecord.from_json(rec).compare_eager
    return [r.name for r in cmp.random] if cmp is not None else []
