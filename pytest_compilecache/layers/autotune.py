"""Autotuning results: template selection (max-autotune), Triton config benchmarks and
coordinate-descent tuning, and the results they store (.best_config). Its rule reads what
the phase really tuned (the tuning record), never torch's counters, which an FX-graph
hit replays. Pure: reads typed cache records."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, Union

from pytest_compilecache.layers import tuning
from pytest_compilecache.layers.base import CacheLayer, LayerInputs, Switch, TorchConfigs
from pytest_compilecache.model import LayerVerdict
from pytest_compilecache.wire import CacheRecord

CacheLike = Union[Dict[str, Any], CacheRecord]

LOCAL_CACHE = Switch("inductor", "autotune_local_cache")


class Autotune(CacheLayer):
    name, short, short_md = "autotune", "autotune", "autotune"
    observed = ("tuning that really ran in the phase (spied select_algorithm, "
                "CachingAutotuner benchmarks, coordinate descent), never counters an "
                "FX-graph hit replays")
    observer = "pytest_compilecache.child.tuning:TuningSpy"
    section, record_type = "tuning", tuning.TuningRecord
    heads = ("cache",)
    suffixes = (".best_config",)
    switches = (LOCAL_CACHE,)

    def config(self, torch: TorchConfigs) -> Optional[Dict[str, Any]]:
        return torch.forced() or torch.switched_off(
            LOCAL_CACHE, "every restart benchmarks its kernel choices again") or torch.on()

    def unpacked(self, warm: CacheRecord, paths: List[str]) -> Tuple[List[str], Optional[str]]:
        """Autotune results a hit wrote out (a remote bundle, say) while no benchmark ran."""
        if not paths or autotune_benchmarks(warm):
            return [], None
        return paths, (f"{len(paths)} autotune result(s) (.best_config) written into the "
                       f"empty cache from the artifact; the warm process benchmarked nothing")

    def judge(self, inputs: LayerInputs) -> Tuple[LayerVerdict, List[str]]:
        """Switched off, the layer is `off` only where tuning ran: a workload that tunes
        nothing (most on CPU) loses nothing by it."""
        lv, notes = autotune_layer(inputs.cold, inputs.warm, inputs.cold_files)
        cfg = inputs.config
        if cfg is not None and cfg.off and lv.state != "n/a":
            lv.state, lv.reasons, lv.setting = "off", [cfg.why or "switched off"], cfg.setting
        return lv, notes


def tuning_done(rec: CacheLike) -> Tuple[Dict[str, List[str]], List[str]]:
    """What a phase (a cache record) really tuned, per kind (`tuning.KINDS`), and for
    each kind no spy could watch on this torch, a note: that kind is not counted, as its
    counter cannot tell (an FX-graph cache hit replays it from the cold compile)."""
    rec = CacheRecord.from_json(rec)
    t = tuning.TuningRecord.optional(rec.sections.get(Autotune.section))
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
    wt = wc.sections.get(Autotune.section)
    uncached = set(tuning.untunable(wt))
    missed = {k: [n for n in v if n not in uncached] for k, v in ws.items()}
    notes = _torch_own(lv, wt, sorted(uncached & {n for v in ws.values() for n in v}))
    if any(missed.values()):
        lv.state = "miss"
        lv.reasons.append(f"the warm run really tuned: {tuning.describe(missed)}")
        lv.reasons += tuning.explain(wt, [n for v in missed.values() for n in v])
    lv.reasons += degraded
    notes += [f"autotune: {d}" for d in degraded]  # shown whatever the state
    return lv, notes


def _torch_own(lv: LayerVerdict, wt: Any, kernels: List[str]) -> List[str]:
    """Kernels torch tuned whatever the cache held: a note with what they cost, or a
    miss where that cost makes the restart cold (tuning.material)."""
    if not kernels:
        return []
    spent, total = tuning.cost(wt, kernels)
    took = f"{spent:.2f} s" + (f" of the warm run's {total:.1f} s" if total else "")
    said = (f"the warm run tuned {len(kernels)} kernel(s) torch tunes at every start "
            f"whatever its cache holds (torch's behaviour, not your setup; their tuning "
            f"took {took}): " + "; ".join(tuning.explain(wt, kernels)))
    if tuning.material(spent, total):
        lv.state = "miss"
        lv.reasons.append(said + "; a third of the warm run or more, so the restart is "
                          "not warm: a torch that reloads them fixes it")
        return []
    return [f"autotune: {said}"]
