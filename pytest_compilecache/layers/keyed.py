"""A layer whose entries have cache keys (AOTAutograd's, the FX graph's), and the rule
both share: each warm lookup against the cold run's, a miss explained by what cold did
with that graph or by the key components that drifted (keys.py; a bypass by torch's
reason and its fix, bypass.py); and the report's graph rows. Pure: reads typed cache
records."""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from pytest_compilecache.layers import keys
from pytest_compilecache.layers.base import CacheLayer, LayerInputs
from pytest_compilecache.layers.bypass import fix_for
from pytest_compilecache.model import LayerVerdict
from pytest_compilecache.wire import CacheEntry, CacheRecord, LayerConfig


class KeyedLayer(CacheLayer):
    keyed = True

    def judge(self, inputs: LayerInputs) -> Tuple[LayerVerdict, List[str]]:
        return keyed_layer(self.name, inputs.cold, inputs.warm, inputs.config, inputs.saved,
                           inputs.precompiled), []

    def graph_rows(self, inputs: LayerInputs) -> List[Dict[str, Any]]:
        return graph_rows(inputs.cold, inputs.warm, inputs.saved, (self.name,))



def tally(entries: List[CacheEntry], saved: Optional[Set[str]] = None) -> str:
    n: Dict[str, int] = defaultdict(int)
    for e in entries:
        n[e.state] += 1
    parts = [f"{k} {n[k]}" for k in ("hit", "miss", "bypass") if n[k]]
    if saved is not None:
        s = sum(1 for e in entries if e.state == "miss" and e.key in saved)
        if n["miss"]:
            parts.append(f"saved {s}")
    return ", ".join(parts) or "no events"


def keyed_layer(layer: str, cc: CacheRecord, wc: CacheRecord, cfg: Optional[LayerConfig],
                saved: Set[str], precompiled: bool) -> LayerVerdict:
    ce, we = cc.entries(layer), wc.entries(layer)
    lv = LayerVerdict(state="hit", cold=tally(ce, saved), warm=tally(we))
    if cfg is not None and cfg.off:  # a setting switched it off: its lookups bypassed it
        lv.state, lv.reasons, lv.setting = "off", [cfg.why or "switched off"], cfg.setting
        return lv
    if cfg is not None and not cfg.enabled:
        lv.state, lv.reasons = "n/a", [cfg.why or "disabled"]
        if we:
            lv.state = "miss" if any(e.state != "hit" for e in we) else "hit"
        return lv
    if precompiled and not we:
        lv.state, lv.reasons = "n/a", ["served by the Dynamo precompile cache"]
        return lv
    if not we and not ce:
        lv.state, lv.reasons = "n/a", ["the workload never reached this cache"]
        return lv
    if not we:
        lv.state, lv.reasons = "miss", ["the warm run made no lookup although cold did"]
        return lv
    bypass = [e for e in we if e.state == "bypass"]
    miss = [e for e in we if e.state == "miss"]
    if bypass:
        lv.state = "bypass"
        lv.reasons = list(dict.fromkeys(bypassed(e) for e in bypass))
    if miss:
        lv.state = "miss" if not bypass else lv.state
        lv.reasons += [explain_miss(layer, e, ce, cc, saved) for e in miss]
    return lv


def bypassed(e: CacheEntry) -> str:
    """torch's reason for bypassing the cache, and how to make it cache the graph."""
    reason = keys.normalize_reason(e.bypass_reason)
    fix = fix_for(reason)
    return (f"graph {e.compile_id}: torch bypassed the cache: {reason or 'no reason given'}"
            + (f" - fix: {fix}" if fix else ""))


def explain_miss(layer: str, e: CacheEntry, cold_entries: List[CacheEntry],
                 cold_rec: CacheRecord, saved: Set[str]) -> str:
    where = f"graph {e.compile_id}{' (backward)' if e.backward else ''}"
    if e.detail == "guard_miss":
        return f"{where}: an entry exists but its shape guards failed: {e.guard_expr}"
    twin = keys.best_match(e, cold_entries)
    if twin is None:
        return f"{where}: no cold entry to compare with (cold compiled other graphs)"
    if twin.key == e.key:
        if e.key in saved:
            return (f"{where}: same key as the entry cold saved, yet warm missed: a corrupt "
                    f"or unreadable entry, not key drift")
        return f"{where}: never saved: " + never_saved_cause(layer, twin, cold_rec)
    diffs = keys.differing_components(twin, e)
    if not diffs:
        return f"{where}: key differs from cold graph {twin.compile_id} but no component does"
    shown = []
    for d in diffs[:6]:
        if d["component"] == "gm":
            shown.append("gm (graph code differs)")
        else:
            shown.append(f"{d['component']}: {d['cold']} -> {d['warm']}")
    more = f" (+{len(diffs) - 6} more)" if len(diffs) > 6 else ""
    return f"{where}: key drifted from cold graph {twin.compile_id}: " + "; ".join(shown) + more


def never_saved_cause(layer: str, cold_entry: CacheEntry, cold_rec: CacheRecord) -> str:
    if layer == "aot_autograd":
        grad = (keys.component_value(cold_entry, "grad_enabled") or "").strip()
        graph = cold_rec.graphs.get(cold_entry.compile_id)
        bwd = any(x.backward for x in (graph.fx_graph if graph is not None else []))
        if grad == "True" and not bwd:
            return ("the forward ran with grad enabled and no backward ran: AOTAutograd saves "
                    "a training graph only when its backward is compiled (lazily, at the first "
                    ".backward()). Serve it under torch.no_grad()/torch.inference_mode(), or "
                    "run a backward in the check (ModelCase(train=True))")
        return "cold missed and wrote no entry (the save failed or was skipped)"
    errs = (cold_rec.counter("inductor", "fxgraph_cache_pickle_error") +
            cold_rec.counter("inductor", "fxgraph_cache_write_error"))
    if errs:
        return f"cold could not write the entry ({errs} pickle/write error(s))"
    return "cold missed and wrote no entry"


def graph_rows(cc: CacheRecord, wc: CacheRecord, saved: Set[str], keyed: Sequence[str]
               ) -> List[Dict[str, Any]]:
    """Every lookup of both runs in the `keyed` layers, for the report; a warm one that
    did not hit with the components that drifted from its cold twin. A graph that needs
    no explaining (a hit, a cold miss whose warm lookup of the same key hit, or any cold
    lookup of a cold-only run, whose components the key manifest store keeps) is kept by
    its key and components' digest; a miss, a bypass and the cold twin of a warm miss keep
    every component."""
    rows = []
    for layer in keyed:
        ce, we = cc.entries(layer), wc.entries(layer)
        explained = _explained(ce, we)
        for phase, entries in (("cold", ce), ("warm", we)):
            for e in entries:
                row: Dict[str, Any] = {"phase": phase, "layer": layer,
                                       "compile_id": e.compile_id, "backward": e.backward,
                                       "state": e.state, "key": e.key,
                                       "components_digest": keys.components_digest(e.components),
                                       "components_count": len(e.components)}
                if (e.state not in ("hit", "miss") or (phase == "warm" and e.state != "hit")
                        or (phase == "cold" and id(e) in explained)):
                    row["components"] = e.components
                if phase == "cold" and e.state == "miss":
                    row["saved"] = e.key in saved
                if e.bypass_reason:
                    row["bypass_reason"] = keys.normalize_reason(e.bypass_reason)
                if phase == "warm" and e.state != "hit":
                    _drift(row, e, ce)
                rows.append(row)
    return rows


def _explained(cold: List[CacheEntry], warm: List[CacheEntry]) -> Set[int]:
    """The cold lookups a warm miss is explained against (its twin), and those whose
    key no warm lookup hit, where the warm run looked up anything: by id()."""
    out = {id(t) for e in warm if e.state != "hit"
           for t in [keys.best_match(e, cold)] if t is not None}
    hit = {(e.key, e.backward) for e in warm if e.state == "hit"}
    if warm:
        out |= {id(e) for e in cold if e.state == "miss" and (e.key, e.backward) not in hit}
    return out


def _drift(row: Dict[str, Any], e: CacheEntry, cold_entries: List[CacheEntry]) -> None:
    twin = keys.best_match(e, cold_entries)
    if twin is not None and twin.key != e.key:
        row["drift"] = keys.differing_components(twin, e)
        gm = next((d for d in row["drift"] if d["component"] == "gm"), None)
        if gm:
            row["graph_code_diff"] = keys.graph_code_diff(gm["cold"], gm["warm"])
