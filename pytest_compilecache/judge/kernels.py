"""The layers of what a warm run builds or tunes outside the graph caches: compiled
kernels (Triton, C++) and autotuning. Pure: reads typed cache records."""
from __future__ import annotations

from typing import Any, Dict, List, Tuple, Union

from pytest_compilecache.judge import tuning
from pytest_compilecache.model import CacheRecord, LayerVerdict

CacheLike = Union[Dict[str, Any], CacheRecord]


def kernels_layer(cc: CacheRecord, wc: CacheRecord, cold_kernel_files: List[str]
                  ) -> LayerVerdict:
    ck, wk = cc.kernels, wc.kernels
    lv = LayerVerdict(state="hit", cold=f"{len(cold_kernel_files)} file(s) built")
    warm_compiled = wk.triton_compiled or 0
    lv.warm = "no new file"
    if wk.triton_listener:
        lv.warm += f", {warm_compiled} Triton compile(s)"
    if not cold_kernel_files and not ck.kernels_via_triton_compile:
        lv.state, lv.reasons = "n/a", ["cold compiled no C++ or Triton kernel"]
    if warm_compiled:
        lv.state = "miss"
        lv.reasons.append(f"the warm run compiled {warm_compiled} Triton kernel(s) from source")
    return lv


def explain_identical_recompiles(lv: LayerVerdict, twins: List[Dict[str, str]],
                                 cc: CacheRecord, wc: CacheRecord) -> None:
    """A warm kernel byte-identical to a cold one: the key moved, not the kernel."""
    if not twins:
        return
    names = ", ".join(f"{t['kernel']} ({t['cold'][:8]} -> {t['warm'][:8]})" for t in twins[:3])
    lv.reasons.append(
        f"{len(twins)} warm Triton kernel(s) are byte-identical to ones cold built, under "
        f"another Triton key: the key changed outside the kernel source (its toolchain "
        f"part, e.g. the ptxas version; Triton options; TRITON_* env vars): {names}")
    for phase, rec in (("cold", cc), ("warm", wc)):
        ptxas = rec.kernels.ptxas_path
        if ptxas is not None and ptxas.start != ptxas.end:
            lv.reasons.append(
                f"TRITON_PTXAS_PATH changed during the {phase} run ({ptxas.start!r} -> "
                f"{ptxas.end!r}): torch sets it lazily on some compile paths, so kernels "
                f"compiled before and after use different ptxas versions and keys; set "
                f"TRITON_PTXAS_PATH explicitly (to {ptxas.end!r}) before starting")
            break


def tuning_done(rec: CacheLike) -> Tuple[Dict[str, List[str]], List[str]]:
    """What a phase (a cache record) really tuned, per kind (`tuning.KINDS`), and for
    each kind no spy could watch on this torch, a note: that kind is not counted, as its
    counter cannot tell (an FX-graph cache hit replays it from the cold compile)."""
    rec = CacheRecord.from_json(rec)
    t = rec.tuning
    seen = tuning.summary(t) or {k: [] for k in tuning.KINDS}
    counters = {"select": rec.counter("inductor", "select_algorithm_autotune"),
                "coordesc": rec.counter("inductor", "coordesc_tuning_bench")}
    degraded = []
    for kind in tuning.KINDS:
        if t is not None and kind in t.watched:
            continue
        seen[kind] = []
        why = (t.unwatched.get(kind) if t is not None else None) or "no spy ran in this phase"
        replayed = (f" (torch's counter says {counters[kind]}, but an FX-graph cache hit "
                    "replays it from the cold compile)" if counters.get(kind) else "")
        degraded.append(f"{tuning.KINDS[kind]} not observed: {why}{replayed}")
    return seen, degraded


def autotune_benchmarks(rec: CacheLike) -> int:
    """Tuning a phase really ran: autotuning it did not get from a cache."""
    return sum(len(v) for v in tuning_done(rec)[0].values())


def autotune_layer(cc: CacheLike, wc: CacheLike, cold_files: List[str]
                   ) -> Tuple[LayerVerdict, List[str]]:
    """The layer, and notes on tuning no cache could have spared (kernels torch keeps
    no tuning result for)."""
    cc, wc = CacheRecord.from_json(cc), CacheRecord.from_json(wc)
    (cs, _), (ws, degraded) = tuning_done(cc), tuning_done(wc)
    cb, wb = sum(map(len, cs.values())), sum(map(len, ws.values()))
    lv = LayerVerdict(state="hit", cold=f"{cb} tuned" + (f": {tuning.describe(cs)}" if cb else ""),
                      warm=f"{wb} tuned" + (f": {tuning.describe(ws)}" if wb else ""))
    if not cb and not cold_files:
        lv.state, lv.reasons = "n/a", ["no autotuning ran cold (max-autotune off, or one config)"]
    uncached = set(tuning.untunable(wc.tuning))
    missed = {k: [n for n in v if n not in uncached] for k, v in ws.items()}
    notes = []
    if uncached & {n for v in ws.values() for n in v}:
        notes.append("autotune: the warm run tuned kernel(s) no cache could spare: "
                     + tuning.explain(wc.tuning, sorted(uncached))[0])
    if any(missed.values()):
        lv.state = "miss"
        lv.reasons.append(f"the warm run really tuned: {tuning.describe(missed)}")
        lv.reasons += tuning.explain(wc.tuning, [n for v in missed.values() for n in v])
    lv.reasons += degraded
    notes += [f"autotune: {d}" for d in degraded]  # shown whatever the state
    return lv, notes
