"""Per-layer verdict of one check from its cold and warm child results.

Pure: takes the children's JSON and the file snapshots, returns a CheckResult.
A layer is `hit`, `miss`, `bypass` or `n/a` (torch lacks it, config disables it, or
the workload never reached it); n/a is never a pass on its own, and a check whose
warm run shows no cache event at all fails.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Tuple

from pytest_compilecache import files as fs
from pytest_compilecache.judge import keys, recompiles
from pytest_compilecache.child.compare import USABLE_REL
from pytest_compilecache.model import KEYED, LAYERS, CheckResult, LayerVerdict

TINY_DIFF = 1e-5


def recorded(nodeid: str, cold: Dict[str, Any], timings: Dict[str, Optional[float]]
             ) -> CheckResult:
    """A cold-only run that records keys (--compile-cache-manifest-only): no verdict."""
    res = CheckResult(nodeid=nodeid, verdict="recorded", device=cold.get("device"),
                      device_name=cold.get("device_name"), form=cold.get("form"),
                      versions=cold.get("versions") or {}, timings=timings)
    res.graphs = _graph_rows(cold.get("cache") or {}, {}, set())
    return res


def judge(nodeid: str, cold: Dict[str, Any], warm: Dict[str, Any], cold_snap: fs.Snapshot,
          warm_new: List[str], timings: Dict[str, Optional[float]],
          triton_dir: Optional[Path] = None, cold_is_other_code: bool = False,
          carrier: Optional[Carrier] = None) -> CheckResult:
    """`cold_is_other_code`: the deploy scenario, whose cold run was another commit: its
    numbers may legitimately differ (new weights, a fixed bug), so only compiled vs
    eager of this commit can show a stale entry there. `carrier`: what the warm process
    started from instead of the cold one's directories (a path of --compile-cache-via),
    named as what did not carry the kernels the warm process rebuilt."""
    cold_files = fs.by_layer(cold_snap)
    warm_files = fs.by_layer(warm_new)
    saved = fs.saved_keys(cold_snap)
    cc, wc = cold.get("cache") or {}, warm.get("cache") or {}
    config = wc.get("layer_config") or {}
    res = CheckResult(nodeid=nodeid, verdict="pass", device=warm.get("device"),
                      device_name=warm.get("device_name"), form=warm.get("form"),
                      versions=warm.get("versions") or {}, timings=timings,
                      job_id={p: r["job_id"] for p, r in (("cold", cold), ("warm", warm))
                              if r.get("job_id")})
    precompiled = counter(wc, "dynamo_cache", "dynamo_cache_hit") > 0
    for layer in KEYED:
        res.layers[layer] = _keyed_layer(layer, cc, wc, config.get(layer), saved, precompiled)
    res.layers["dynamo_pgo"] = _pgo_layer(cc, wc, config.get("dynamo_pgo"))
    res.layers["kernels"] = _kernels_layer(cc, wc, cold_files.get("kernels", []))
    res.layers["autotune"], tuning_notes = _autotune_layer(cc, wc, cold_files.get("autotune", []))
    res.notes += tuning_notes
    for layer, paths in warm_files.items():
        if layer == "other":
            continue
        lv = res.layers[layer]
        lv.files = paths
        lv.warm = f"{len(paths)} new file(s)"
        if lv.state in ("hit", "n/a"):
            lv.state = "miss"
            lv.reasons.append(f"the warm run wrote {len(paths)} new file(s) for this layer")
        if layer == "kernels" and carrier:
            lv.reasons.insert(0, rebuilt_kernels(paths, carrier))
    if triton_dir is not None and warm_files.get("kernels"):
        _explain_identical_recompiles(res.layers["kernels"], fs.identical_triton_recompiles(
            triton_dir, warm_files["kernels"]), cc, wc)
    if warm_files.get("other"):
        res.notes.append(f"warm run wrote {len(warm_files['other'])} file(s) no cache layer "
                         f"explains: " + ", ".join(warm_files["other"][:5]))
    res.graphs = _graph_rows(cc, wc, saved)
    for text in warm.get("notes") or []:  # what the phase itself found worth saying
        _note(res, text)
    _outputs(res, cold, warm, cold_is_other_code)
    for name in LAYERS:
        lv = res.layers[name]
        if lv.state in ("miss", "bypass"):
            res.problems.append(f"{name}: {lv.state}" + (f" - {lv.reasons[0]}" if lv.reasons else ""))

    recompiles.judge(res, cc, wc, cold_is_other_code)
    if not any(lv.state in ("hit", "miss", "bypass") for lv in res.layers.values()) \
            and not precompiled:  # a miss has its reason above: this is for none at all
        res.problems.append("no cache events at all: the warm run hit no cache layer (caches "
                            "disabled, a backend other than inductor, or nothing compiled)")
    if res.problems:
        res.verdict = "fail"
    return res


@dataclass(frozen=True)
class Carrier:
    """What a warm process started from instead of the cold one's directories."""
    name: str      # "the mega-cache"
    why: str = ""  # what torch is known to leave out of it, with the issues that say so


def rebuilt_kernels(paths: List[str], carrier: Carrier) -> str:
    objects = [p for p in paths if p.endswith(".so")]
    return (f"the warm process rebuilt {len(objects)} C++ kernel object(s) and "
            f"{len(paths) - len(objects)} other kernel file(s) that {carrier.name} did not "
            f"carry" + (f" ({carrier.why})" if carrier.why else "") + ": "
            + ", ".join(p.rsplit("/", 1)[-1] for p in (objects or paths)[:5]))


def judge_loaded(nodeid: str, cold: Dict[str, Any], warm: Dict[str, Any], warm_new: List[str],
                 timings: Dict[str, Optional[float]], carrier: Carrier) -> CheckResult:
    """A warm process that loaded a compiled artifact instead of calling torch.compile
    (aot, aoti): it must compile nothing at all, and write no kernel. The cache layers
    are not how it starts warm, so each says n/a, except the kernels it rebuilt."""
    wc = warm.get("cache") or {}
    res = CheckResult(nodeid=nodeid, verdict="pass", device=warm.get("device"),
                      device_name=warm.get("device_name"), form=warm.get("form"),
                      versions=warm.get("versions") or {}, timings=timings)
    for layer in LAYERS:
        res.layers[layer] = LayerVerdict(state="n/a",
                                         reasons=[f"not used: {carrier.name} is loaded"])
    events = {"Dynamo frame(s) traced": counter(wc, "frames", "total"),
              "FX graph cache miss(es)": counter(wc, "inductor", "fxgraph_cache_miss"),
              "AOTAutograd cache miss(es)": counter(wc, "aot_autograd", "autograd_cache_miss"),
              "Triton kernel(s) compiled": (wc.get("kernels") or {}).get("triton_compiled") or 0}
    compiled = [f"{n} {what}" for what, n in events.items() if n]
    if compiled:
        res.problems.append(f"compile: the warm process compiled after loading {carrier.name}: "
                            + ", ".join(compiled))
    kernels = fs.by_layer(warm_new).get("kernels") or []
    if kernels:
        lv = res.layers["kernels"]
        lv.state, lv.files, lv.warm = "miss", kernels, f"{len(kernels)} new file(s)"
        lv.reasons = [rebuilt_kernels(kernels, carrier)]
        res.problems.append(f"kernels: miss - {lv.reasons[0]}")
    other = [p for p in warm_new if p not in kernels]
    if other:
        res.notes.append(f"the warm process wrote {len(other)} other file(s) into its cache "
                         f"root: " + ", ".join(other[:5]))
    _outputs(res, cold, warm)
    if res.problems:
        res.verdict = "fail"
    return res


def counter(rec: Dict[str, Any], group: str, name: str) -> int:
    return int(((rec.get("counters") or {}).get(group) or {}).get(name, 0))


def _entries(rec: Dict[str, Any], layer: str) -> List[Dict[str, Any]]:
    out = []
    for cid, g in (rec.get("graphs") or {}).items():
        for e in g.get(layer, []):
            out.append({**e, "compile_id": cid})
    return out


def _tally(entries: List[Dict[str, Any]], saved: Optional[Set[str]] = None) -> str:
    n: Dict[str, int] = defaultdict(int)
    for e in entries:
        n[e["state"]] += 1
    parts = [f"{k} {n[k]}" for k in ("hit", "miss", "bypass") if n.get(k)]
    if saved is not None:
        s = sum(1 for e in entries if e["state"] == "miss" and e.get("key") in saved)
        if n.get("miss"):
            parts.append(f"saved {s}")
    return ", ".join(parts) or "no events"


def _keyed_layer(layer: str, cc: Dict[str, Any], wc: Dict[str, Any], cfg: Optional[Dict[str, Any]],
                 saved: Set[str], precompiled: bool) -> LayerVerdict:
    ce, we = _entries(cc, layer), _entries(wc, layer)
    lv = LayerVerdict(state="hit", cold=_tally(ce, saved), warm=_tally(we))
    if cfg is not None and not cfg.get("enabled", True):
        lv.state, lv.reasons = "n/a", [cfg.get("why") or "disabled"]
        if we:
            lv.state = "miss" if any(e["state"] != "hit" for e in we) else "hit"
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
    bypass = [e for e in we if e["state"] == "bypass"]
    miss = [e for e in we if e["state"] == "miss"]
    if bypass:
        lv.state = "bypass"
        lv.reasons = list(dict.fromkeys(_bypassed(e) for e in bypass))
    if miss:
        lv.state = "miss" if not bypass else lv.state
        lv.reasons += [explain_miss(layer, e, ce, cc, saved) for e in miss]
    return lv


def _bypassed(e: Dict[str, Any]) -> str:
    """torch's reason for bypassing the cache, and how to make it cache the graph."""
    from pytest_compilecache.judge.bypass import fix_for

    reason = keys.normalize_reason(e.get("bypass_reason"))
    fix = fix_for(reason)
    return (f"graph {e['compile_id']}: torch bypassed the cache: {reason or 'no reason given'}"
            + (f" - fix: {fix}" if fix else ""))


def explain_miss(layer: str, e: Dict[str, Any], cold_entries: List[Dict[str, Any]],
                 cold_rec: Dict[str, Any], saved: Set[str]) -> str:
    where = f"graph {e['compile_id']}{' (backward)' if e.get('backward') else ''}"
    if e.get("detail") == "guard_miss":
        return f"{where}: an entry exists but its shape guards failed: {e.get('guard_expr')}"
    twin = keys.best_match(e, cold_entries)
    if twin is None:
        return f"{where}: no cold entry to compare with (cold compiled other graphs)"
    if twin.get("key") == e.get("key"):
        if e.get("key") in saved:
            return (f"{where}: same key as the entry cold saved, yet warm missed: a corrupt "
                    f"or unreadable entry, not key drift")
        return f"{where}: never saved: " + never_saved_cause(layer, twin, cold_rec)
    diffs = keys.differing_components(twin, e)
    if not diffs:
        return f"{where}: key differs from cold graph {twin['compile_id']} but no component does"
    shown = []
    for d in diffs[:6]:
        if d["component"] == "gm":
            shown.append("gm (graph code differs)")
        else:
            shown.append(f"{d['component']}: {d['cold']} -> {d['warm']}")
    more = f" (+{len(diffs) - 6} more)" if len(diffs) > 6 else ""
    return f"{where}: key drifted from cold graph {twin['compile_id']}: " + "; ".join(shown) + more


def never_saved_cause(layer: str, cold_entry: Dict[str, Any], cold_rec: Dict[str, Any]) -> str:
    if layer == "aot_autograd":
        grad = (keys.component_value(cold_entry, "grad_enabled") or "").strip()
        cid = cold_entry.get("compile_id")
        bwd = any(x.get("backward") for x in ((cold_rec.get("graphs") or {}).get(cid) or {})
                  .get("fx_graph", []))
        if grad == "True" and not bwd:
            return ("the forward ran with grad enabled and no backward ran: AOTAutograd saves "
                    "a training graph only when its backward is compiled (lazily, at the first "
                    ".backward()). Serve it under torch.no_grad()/torch.inference_mode(), or "
                    "run a backward in the check (ModelCase(train=True))")
        return "cold missed and wrote no entry (the save failed or was skipped)"
    errs = counter(cold_rec, "inductor", "fxgraph_cache_pickle_error") + \
        counter(cold_rec, "inductor", "fxgraph_cache_write_error")
    if errs:
        return f"cold could not write the entry ({errs} pickle/write error(s))"
    return "cold missed and wrote no entry"


def _pgo_layer(cc: Dict[str, Any], wc: Dict[str, Any], cfg: Optional[Dict[str, Any]]) -> LayerVerdict:
    def io(rec: Dict[str, Any]) -> Dict[str, int]:
        n = {"read": 0, "written": 0}
        for g in (rec.get("graphs") or {}).values():
            for k in n:
                n[k] += (g.get("pgo") or {}).get(k, 0)
        return n

    c, w = io(cc), io(wc)
    lv = LayerVerdict(state="hit", cold=f"written {c['written']}", warm=f"read {w['read']}")
    if cfg is not None and cfg.get("no_job_id"):
        return _pgo_without_job_id(lv, wc, cc)
    if cfg is not None and not cfg.get("enabled", True):
        return LayerVerdict("n/a", lv.cold, lv.warm, [cfg.get("why") or "disabled"])
    if not c["written"] and not w["read"]:
        return LayerVerdict("n/a", lv.cold, lv.warm, ["no profile state was written"])
    if c["written"] and not w["read"]:
        return LayerVerdict("miss", lv.cold, lv.warm,
                            ["cold wrote PGO state but the warm run never read it "
                             "(TORCH_COMPILE_JOB_ID or cache_key_tag differ?)"])
    cold_n, warm_n = _compiles_per_frame(cc), _compiles_per_frame(wc)
    # a frame recompiled on guards no profile addresses (a value, an object) is the
    # recompile check's to report (recompiles.py), not PGO's
    warm_n = {f: n for f, n in warm_n.items() if _pgo_addresses(wc, f)}
    for frame, n in sorted(warm_n.items()):
        if n > 1 and n >= cold_n.get(frame, 0):
            lv.state = "miss"
            lv.reasons.append(
                f"frame {frame}: the profile was read yet warm recompiled it {n} times, as "
                f"cold did: the saved profile did not apply (its CodeId differs per process, "
                f"e.g. a closure on torch 2.12+ with Python <= 3.11)")
    if sum(warm_n.values()) > sum(cold_n.get(f, 0) for f in warm_n):
        lv.state = "miss"
        lv.reasons.append(f"warm compiled {sum(warm_n.values())} graphs, cold ended with "
                          f"{sum(cold_n.values())}")
    return lv


def _pgo_addresses(rec: Dict[str, Any], frame: str) -> bool:
    """Did `frame` recompile on a shape guard (or for reasons unknown)?"""
    why = [r for r in rec.get("recompile_reasons") or [] if str(r).startswith(f"{frame}/")]
    return not why or any(g in r for r in why for g in _SHAPE_GUARD)


# Guard failures that automatic dynamic (and so saved PGO state) turns into one
# dynamic graph: a restart with PGO state compiles that graph first.
_SHAPE_GUARD = ("size mismatch", "stride mismatch")


def _pgo_without_job_id(lv: LayerVerdict, wc: Dict[str, Any],
                        cc: Optional[Dict[str, Any]] = None) -> LayerVerdict:
    """No job id: torch keeps no profile across restarts. That costs nothing unless
    the warm run recompiled a frame on a shape guard, as every restart then will."""
    lv.state, lv.reasons = "off", ["no job id: PGO state is not persisted across restarts"]
    again = {f: n for f, n in _compiles_per_frame(wc).items() if n > 1}
    shape = [r for r in wc.get("recompile_reasons") or [] if any(g in r for g in _SHAPE_GUARD)]
    if not again:
        return lv
    frames = ", ".join(f"frame {f} compiled {n} times" for f, n in sorted(again.items()))
    if not shape:
        lv.reasons.append(f"the warm run recompiled ({frames}) on guards PGO does not "
                          f"address: " + "; ".join((wc.get("recompile_reasons") or ["?"])[:2]))
        return lv
    lv.state = "miss"
    unstable = _unstable_code_ids(cc or {}, wc)
    lead = (f"no job id, so no PGO state across restarts, and the warm run recompiled: "
            f"{frames} ({shape[0].strip()}). Every restart pays this static-then-dynamic "
            f"recompile. ")
    if unstable:
        lv.reasons = [
            lead + f"A job id would not help: the profile is filed under each code's id, "
            f"and for {', '.join(unstable[:3])} that id differs per process (a closure over "
            f"a function, whose hash Python randomizes per process), so no saved profile "
            f"would apply. Compile the varying dimension dynamic from the start instead "
            f"(torch._dynamo.mark_dynamic(x, 0) on the input, or torch.compile(..., "
            f"dynamic=True)), or move the function out of the closure"]
        return lv
    lv.reasons = [
        lead + "Set a job id that is stable per model in production "
        "(TORCH_COMPILE_JOB_ID=<id>, or torch.compiler.config.job_id = '<id>'); torch's "
        "docs: the id tells torch that two runs are the same workload and may share "
        "profiles, so never share one between different models or topologies"]
    return lv


def _unstable_code_ids(cc: Dict[str, Any], wc: Dict[str, Any]) -> List[str]:
    """Codes whose PGO id (its closure hash) differs between the cold and warm process."""
    cold = (cc.get("dynamo") or {}).get("code_ids") or {}
    warm = (wc.get("dynamo") or {}).get("code_ids") or {}
    return sorted(k for k in cold.keys() & warm.keys() if cold[k] != warm[k])


def _compiles_per_frame(rec: Dict[str, Any]) -> Dict[str, int]:
    n: Dict[str, int] = defaultdict(int)
    for cid, g in (rec.get("graphs") or {}).items():
        if "/" in cid and (g.get("fx_graph") or g.get("aot_autograd")):
            n[cid.split("/")[0]] += 1
    return dict(n)


def _kernels_layer(cc: Dict[str, Any], wc: Dict[str, Any], cold_kernel_files: List[str]
                   ) -> LayerVerdict:
    ck, wk = cc.get("kernels") or {}, wc.get("kernels") or {}
    lv = LayerVerdict(state="hit", cold=f"{len(cold_kernel_files)} file(s) built")
    warm_compiled = wk.get("triton_compiled") or 0
    lv.warm = "no new file"
    if wk.get("triton_listener"):
        lv.warm += f", {warm_compiled} Triton compile(s)"
    if not cold_kernel_files and not ck.get("kernels_via_triton_compile"):
        lv.state, lv.reasons = "n/a", ["cold compiled no C++ or Triton kernel"]
    if warm_compiled:
        lv.state = "miss"
        lv.reasons.append(f"the warm run compiled {warm_compiled} Triton kernel(s) from source")
    return lv


def _explain_identical_recompiles(lv: LayerVerdict, twins: List[Dict[str, str]],
                                  cc: Dict[str, Any], wc: Dict[str, Any]) -> None:
    """A warm kernel byte-identical to a cold one: the key moved, not the kernel."""
    if not twins:
        return
    names = ", ".join(f"{t['kernel']} ({t['cold'][:8]} -> {t['warm'][:8]})" for t in twins[:3])
    lv.reasons.append(
        f"{len(twins)} warm Triton kernel(s) are byte-identical to ones cold built, under "
        f"another Triton key: the key changed outside the kernel source (its toolchain "
        f"part, e.g. the ptxas version; Triton options; TRITON_* env vars): {names}")
    for phase, rec in (("cold", cc), ("warm", wc)):
        ptxas = (rec.get("kernels") or {}).get("ptxas_path") or {}
        if ptxas and ptxas.get("start") != ptxas.get("end"):
            lv.reasons.append(
                f"TRITON_PTXAS_PATH changed during the {phase} run ({ptxas.get('start')!r} -> "
                f"{ptxas.get('end')!r}): torch sets it lazily on some compile paths, so kernels "
                f"compiled before and after use different ptxas versions and keys; set "
                f"TRITON_PTXAS_PATH explicitly (to {ptxas.get('end')!r}) before starting")
            break


def tuning_done(rec: Dict[str, Any]) -> Tuple[Dict[str, List[str]], List[str]]:
    """What a phase (a cache record) really tuned, per kind (`tuning.KINDS`), and for
    each kind no spy could watch on this torch, a note: that kind is not counted, as its
    counter cannot tell (an FX-graph cache hit replays it from the cold compile)."""
    from pytest_compilecache.judge import tuning

    t = rec.get("tuning") or {}
    seen = tuning.summary(t) or {k: [] for k in tuning.KINDS}
    counters = {"select": counter(rec, "inductor", "select_algorithm_autotune"),
                "coordesc": counter(rec, "inductor", "coordesc_tuning_bench")}
    degraded = []
    for kind in tuning.KINDS:
        if kind in (t.get("watched") or {}):
            continue
        seen[kind] = []
        why = (t.get("unwatched") or {}).get(kind) or "no spy ran in this phase"
        replayed = (f" (torch's counter says {counters[kind]}, but an FX-graph cache hit "
                    "replays it from the cold compile)" if counters.get(kind) else "")
        degraded.append(f"{tuning.KINDS[kind]} not observed: {why}{replayed}")
    return seen, degraded


def autotune_benchmarks(rec: Dict[str, Any]) -> int:
    """Tuning a phase really ran: autotuning it did not get from a cache."""
    return sum(len(v) for v in tuning_done(rec)[0].values())


def _autotune_layer(cc: Dict[str, Any], wc: Dict[str, Any], cold_files: List[str]
                    ) -> Tuple[LayerVerdict, List[str]]:
    """The layer, and notes on tuning no cache could have spared (kernels torch keeps
    no tuning result for)."""
    from pytest_compilecache.judge import tuning

    (cs, _), (ws, degraded) = tuning_done(cc), tuning_done(wc)
    cb, wb = sum(map(len, cs.values())), sum(map(len, ws.values()))
    lv = LayerVerdict(state="hit", cold=f"{cb} tuned" + (f": {tuning.describe(cs)}" if cb else ""),
                      warm=f"{wb} tuned" + (f": {tuning.describe(ws)}" if wb else ""))
    if not cb and not cold_files:
        lv.state, lv.reasons = "n/a", ["no autotuning ran cold (max-autotune off, or one config)"]
    uncached = set(tuning.untunable(wc.get("tuning")))
    missed = {k: [n for n in v if n not in uncached] for k, v in ws.items()}
    notes = []
    if uncached & {n for v in ws.values() for n in v}:
        notes.append("autotune: the warm run tuned kernel(s) no cache could spare: "
                     + tuning.explain(wc.get("tuning"), sorted(uncached))[0])
    if any(missed.values()):
        lv.state = "miss"
        lv.reasons.append(f"the warm run really tuned: {tuning.describe(missed)}")
        lv.reasons += tuning.explain(wc.get("tuning"), [n for v in missed.values() for n in v])
    lv.reasons += degraded
    notes += [f"autotune: {d}" for d in degraded]  # shown whatever the state
    return lv, notes


def _graph_rows(cc: Dict[str, Any], wc: Dict[str, Any], saved: Set[str]) -> List[Dict[str, Any]]:
    rows = []
    for layer in KEYED:
        ce = _entries(cc, layer)
        for phase, entries in (("cold", ce), ("warm", _entries(wc, layer))):
            for e in entries:
                row = {"phase": phase, "layer": layer, "compile_id": e["compile_id"],
                       "backward": e.get("backward", False), "state": e["state"],
                       "key": e.get("key"), "components": e.get("components") or []}
                if phase == "cold" and e["state"] == "miss":
                    row["saved"] = e.get("key") in saved
                if e.get("bypass_reason"):
                    row["bypass_reason"] = keys.normalize_reason(e["bypass_reason"])
                if phase == "warm" and e["state"] != "hit":
                    twin = keys.best_match(e, ce)
                    if twin is not None and twin.get("key") != e.get("key"):
                        row["drift"] = keys.differing_components(twin, e)
                        gm = next((d for d in row["drift"] if d["component"] == "gm"), None)
                        if gm:
                            row["graph_code_diff"] = keys.graph_code_diff(gm["cold"], gm["warm"])
                rows.append(row)
    return rows


def _outputs(res: CheckResult, cold: Dict[str, Any], warm: Dict[str, Any],
             cold_is_other_code: bool = False) -> None:
    cmp_cold = warm.get("compare_cold")
    res.outputs = {"count": len(warm.get("outputs") or {}),
                   "warm_vs_cold": cmp_cold, "cold_vs_eager": cold.get("compare_eager"),
                   "warm_vs_eager": warm.get("compare_eager")}
    if cmp_cold is None:
        res.problems.append("outputs: the warm run produced no comparison with cold")
    elif not cmp_cold.get("ok"):
        names = ", ".join(m["name"] + (f" ({m['message']})" if m.get("message") else "")
                          for m in cmp_cold["mismatches"][:4])
        if cold_is_other_code:
            res.notes.append(f"outputs differ from the baseline's (information: the cold run "
                             f"was another commit; a stale entry shows as warm compiled vs "
                             f"eager of this commit): {names}")
        else:
            # beyond a float64 run's noise is never "tiny", whatever its size
            tiny = all(m.get("max_abs_diff") is not None and m["max_abs_diff"] < TINY_DIFF
                       and "float64" not in m and not m.get("random")
                       for m in cmp_cold["mismatches"])
            keyed = [res.layers[k].state for k in KEYED if k in res.layers]
            # an artifact path (keyed layers n/a) loaded its answer: that can be stale too
            loaded = "hit" in keyed or not any(st in ("miss", "bypass") for st in keyed)
            why = (" - tiny: a nondeterministic kernel (atomic adds in a backward, say) is "
                   "likelier than a stale entry; if so, allow it with "
                   "--compile-cache-warm-tolerance=ATOL,RTOL" if tiny
                   else " - a stale or corrupt cache entry returns other numbers" if loaded
                   else " - no cache entry answered (the graph layers missed, above): the "
                        "warm process compiled another graph, which computes other numbers "
                        "(a value captured per process, such as a random constant?)")
            res.problems.append(f"outputs: warm differs from cold ({cmp_cold.get('mode')}): "
                                f"{names}{why}")
    noise = (cmp_cold or {}).get("within_noise") or []
    if noise:
        shown = ", ".join(f"{v['name']} (max abs diff {v['max_abs_diff']:.3g}; RMSE "
                          f"{v['diff_rmse']:.3g}, allowed {v['limit']:.3g})" for v in noise[:3])
        rule = ("of a float64 run" if not any(v.get("random") for v in noise) else
                "(a float64 run's, or float32's noise floor for tensors that change with the "
                "random seed)")
        res.notes.append(f"warm differs from cold bitwise in {len(noise)} tensor(s) within "
                         f"arithmetic noise {rule} (a nondeterministic kernel, e.g. "
                         f"atomic adds): {shown}")
    for phase, cmp in (("cold", cold.get("compare_eager")), ("warm", warm.get("compare_eager"))):
        if not cmp:
            continue
        if cmp.get("ok") is None and cmp.get("note"):
            _note(res, f"eager comparison skipped: {cmp['note']}")
            continue
        if not cmp.get("ok"):
            first = cmp["mismatches"][0]
            msg = first["message"].splitlines()[0] if first.get("message") else ""
            res.problems.append(f"outputs: {phase} compiled differs from eager in "
                                f"{len(cmp['mismatches'])} tensor(s); first {first['name']}: {msg}")
        f64 = cmp.get("float64") or {}
        ungated = cmp.get("ungated_gradients") or []
        if ungated:
            why = (f"their float64 run is no reference (eager misses it by up to "
                   f"{f64.get('unusable_miss') or 0:.0%} RMS, over the {USABLE_REL:.0%} cut)"
                   if f64.get("available") else
                   f"no float64 reference ({f64.get('note') or 'none made'})")
            _note(res, f"{phase}: {len(ungated)} gradient(s) that differ from eager are not "
                       f"gated: {why}; first {ungated[0]}, largest norm-relative difference "
                       f"{cmp.get('gradient_rel_error', 0):.3g}")
    _random(res, cold, warm)
    if not warm.get("outputs"):
        res.notes.append("the workload returned no tensors to compare; record values with "
                         "the compile_cache fixture's record()")


def _random(res: CheckResult, cold: Dict[str, Any], warm: Dict[str, Any]) -> None:
    """Say which tensors eager cannot judge because they change with the random seed,
    and what gates them instead."""
    from pytest_compilecache.child.randomness import WHY

    for rec in (warm, cold):
        if rec.get("random_note"):
            _note(res, rec["random_note"])
    cmp = warm.get("compare_eager") or cold.get("compare_eager") or {}
    names = [r["name"] for r in cmp.get("random") or []]
    res.outputs["random"] = names
    if names:
        gate = ("they are gated warm vs cold instead: the same seed and compiled graph draw "
                "the same numbers" if "compare_cold" in warm else "nothing else gates them here")
        _note(res, f"compiled vs eager: {len(names)} of {cmp.get('total', len(names))} tensors "
                   f"not comparable: {WHY}: {', '.join(names[:4])}"
                   + (f" (+{len(names) - 4} more)" if len(names) > 4 else "") + f"; {gate}")


def _note(res: CheckResult, text: str) -> None:
    if text not in res.notes:
        res.notes.append(text)
