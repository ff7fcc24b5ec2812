"""What a phase's tuning record says, in the judge's words: what it really tuned per
kind, which kernels torch keeps no tuning result for (tuned at every start: no cache
miss), and what each kernel's stored result held when it was tuned anyway. The record
is the child's tuning spy's (child/tuning.py, which says why tuning is counted where
torch runs it and not from its counters). Pure.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, Union

from pytest_compilecache.terms import LOST_MARK, NO_CACHE, SCALED_DECLINED
from pytest_compilecache.wirejson import Wire


@dataclass
class TuningRecord(Wire):
    """The autotune layer's section of a cache record: what the tuning spy
    (child/tuning.py) saw, kind -> kernels or ops really tuned."""
    seen: Dict[str, List[str]] = field(default_factory=dict)
    why: Dict[str, str] = field(default_factory=dict)        # kernel -> its stored result
    watched: Dict[str, str] = field(default_factory=dict)    # kind -> the method wrapped
    unwatched: Dict[str, str] = field(default_factory=dict)  # kind -> why not
    seconds: Dict[str, float] = field(default_factory=dict)  # kernel -> its tuning's s
    workload_s: Optional[float] = None  # the spied workload's seconds (start to stop)


# a phase's tuning record (`TuningSpy.record()`), typed or as the child wrote it
TuningLike = Union[None, Dict[str, Any], TuningRecord]

# the kinds the child's spy counts (child/tuning.SPIES), as the judge names them
KINDS = {"select": "template selection(s)", "configs": "config benchmark(s)",
         "coordesc": "coordinate-descent tuning(s)"}


def explain(rec: TuningLike, kernels: List[str]) -> List[str]:
    """'tuned where <what was stored>: kernel, ...', per kind of stored result, for
    these kernels."""
    t = TuningRecord.optional(rec)
    why = t.why if t is not None else {}
    by_reason: Dict[str, List[str]] = {}
    for kernel in dict.fromkeys(kernels):
        if why.get(kernel):
            by_reason.setdefault(why[kernel], []).append(kernel)
    return [f"tuned where {reason}: {_names(names)}" for reason, names in sorted(by_reason.items())]


# what torch itself does at every start it happens (no cache for the kernel; a stored
# result torch throws away): no setting of the user's spares it, a newer torch may
TORCH_OWN = (NO_CACHE, SCALED_DECLINED, LOST_MARK)


def untunable(rec: TuningLike) -> List[str]:
    """Kernels torch tunes whatever the cache holds (TORCH_OWN): not a cache miss in
    itself; layers/autotune.py weighs what they cost."""
    t = TuningRecord.optional(rec)
    return [k for k, why in (t.why if t is not None else {}).items() if why in TORCH_OWN]


# Tuning torch does at every start whatever the cache holds (TORCH_OWN) makes the restart
# cold only where it costs at least MATERIAL_S seconds and a third of the warm run. Which
# config wins, and so whether torch throws its stored result away, is timing noise (more
# often lost under load): on an H200 (torch 2.11) one MLP kernel's lost coordinate-descent
# mark cost 0.19-0.57 s of a 1.5-2.3 s warm run in some runs and nothing in others, while
# resnet18 under max-autotune re-tuned 5-10 kernels in every run, 3.5-11 s of a 6.5-14 s
# warm run (docs/gpu-results.md).
MATERIAL_SHARE, MATERIAL_S = 1 / 3, 1.0


def material(spent: float, total: Optional[float]) -> bool:
    """Whether tuning that took `spent` seconds makes a `total`-second warm run cold."""
    return bool(total) and spent >= max(MATERIAL_S, MATERIAL_SHARE * (total or 0.0))


def spared(rec: TuningLike) -> List[str]:
    """Kernels torch tuned whatever its cache held (TORCH_OWN) at a cost that leaves the
    start warm: their tuning's Triton compiles are no kernel-cache miss either."""
    t = TuningRecord.optional(rec)
    if t is None:
        return []
    tuned = {n for names in t.seen.values() for n in names}
    own = [k for k in untunable(t) if k in tuned]
    spent, total = cost(t, own)
    return [] if material(spent, total) else own


def cost(rec: TuningLike, kernels: List[str]) -> Tuple[float, Optional[float]]:
    """Seconds these kernels' tuning took in the phase, and the spied workload's
    seconds (None in a record from before the spy timed them)."""
    t = TuningRecord.optional(rec)
    if t is None:
        return 0.0, None
    spent = sum(t.seconds.get(k, 0.0) for k in dict.fromkeys(kernels))
    return spent, t.workload_s


def summary(rec: TuningLike) -> Optional[Dict[str, List[str]]]:
    """What a phase really tuned, per kind; None when no spy ran (an older record)."""
    t = TuningRecord.optional(rec)
    if t is None or not t.watched:
        return None
    return {k: list(t.seen.get(k) or []) for k in KINDS}


def describe(seen: Dict[str, List[str]]) -> str:
    """'2 template selection(s) (mm, addmm), 6 config benchmark(s) (triton_poi_...)'"""
    parts = []
    for kind, label in KINDS.items():
        names = seen.get(kind) or []
        if names:
            parts.append(f"{len(names)} {label} ({_names(names)})")
    return ", ".join(parts)


def _names(names: List[str]) -> str:
    short = list(dict.fromkeys(names))
    more = f" +{len(short) - 3} more" if len(short) > 3 else ""
    return ", ".join(short[:3]) + more
