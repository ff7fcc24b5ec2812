"""Per-layer verdict of one check from its cold and warm phase records.

Pure: takes the children's records (typed, `model.PhaseRecord`, or as the JSON they
wrote) and the file snapshots, returns a CheckResult. A layer is `hit`, `miss`, `bypass`,
`off` (a setting switched it off: the test's code fails the check) or `n/a` (torch lacks
it, or the workload never reached it); n/a is never a pass on its own, and a check whose
warm run shows no cache event at all fails.
Each layer is judged through its module in layers/ (the rules: keyed.py, pgo.py and
kernels.py here); the outputs in outputs.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Union

from pytest_compilecache import files as fs
from pytest_compilecache import layers
from pytest_compilecache.judge import recompiles
from pytest_compilecache.judge.keyed import graph_rows
from pytest_compilecache.judge.kernels import explain_identical_recompiles
from pytest_compilecache.judge.outputs import note, outputs
from pytest_compilecache.layers import LayerInputs
from pytest_compilecache.model import (CacheRecord, CheckResult, LayerVerdict,
                                       PhaseRecord, RecordLike)


def recorded(nodeid: str, cold: RecordLike, timings: Dict[str, Optional[float]]
             ) -> CheckResult:
    """A cold-only run that records keys (--compile-cache-manifest-only): no verdict."""
    rec = PhaseRecord.from_json(cold)
    res = CheckResult(nodeid=nodeid, verdict="recorded", device=rec.device,
                      device_name=rec.device_name, form=rec.form, versions=rec.versions,
                      timings=timings)
    res.graphs = graph_rows(rec.cache, CacheRecord(), set(), layers.KEYED)
    return res


@dataclass(frozen=True)
class Carrier:
    """What a warm process started from instead of the cold one's directories."""
    name: str      # "the mega-cache"
    why: str = ""  # what torch is known to leave out of it, with the issues that say so


def judge(nodeid: str, cold: RecordLike, warm: RecordLike, cold_snap: fs.Snapshot,
          warm_new: List[str], timings: Dict[str, Optional[float]],
          triton_dir: Optional[Path] = None, cold_is_other_code: bool = False,
          carrier: Optional[Carrier] = None) -> CheckResult:
    """`cold_is_other_code`: the deploy scenario, whose cold run was another commit: its
    numbers may legitimately differ (new weights, a fixed bug), so only compiled vs
    eager of this commit can show a stale entry there. `carrier`: what the warm process
    started from instead of the cold one's directories (a path of --compile-cache-via),
    named as what did not carry the kernels the warm process rebuilt."""
    c, w = PhaseRecord.from_json(cold), PhaseRecord.from_json(warm)
    cc, wc = c.cache, w.cache
    saved = fs.saved_keys(cold_snap)
    res = CheckResult(nodeid=nodeid, verdict="pass", device=w.device,
                      device_name=w.device_name, form=w.form, versions=w.versions,
                      timings=timings,
                      job_id={p: r.job_id for p, r in (("cold", c), ("warm", w)) if r.job_id})
    precompiled = wc.counter("dynamo_cache", "dynamo_cache_hit") > 0
    _layers(res, cc, wc, layers.by_layer(cold_snap), saved, precompiled)
    _warm_writes(res, layers.by_layer(warm_new), cc, wc, triton_dir, carrier)
    res.graphs = graph_rows(cc, wc, saved, layers.KEYED)
    for text in w.notes:  # what the phase itself found worth saying
        note(res, text)
    outputs(res, c, w, cold_is_other_code)
    for layer in layers.REGISTRY:  # each layer's own rule: a miss, a switch set in code
        res.problems += layer.problems(res.layers[layer.name], wc.layer_config.get(layer.name))

    recompiles.judge(res, cc, wc, cold_is_other_code)
    if not any(lv.state in ("hit", "miss", "bypass") for lv in res.layers.values()) \
            and not precompiled:  # a miss has its reason above: this is for none at all
        res.problems.append("no cache events at all: the warm run hit no cache layer (caches "
                            "disabled, a backend other than inductor, or nothing compiled)")
    return res.finalize()


def _layers(res: CheckResult, cc: CacheRecord, wc: CacheRecord, cold_files: Dict[str, List[str]],
            saved: Set[str], precompiled: bool) -> None:
    """Each layer as the cold and warm runs' cache events show it."""
    config = wc.layer_config
    for layer in layers.REGISTRY:
        res.layers[layer.name], notes = layer.judge(LayerInputs(
            cc, wc, config.get(layer.name), cold_files.get(layer.name, []), saved, precompiled))
        res.notes += notes


def _warm_writes(res: CheckResult, warm_files: Dict[str, List[str]], cc: CacheRecord,
                 wc: CacheRecord, triton_dir: Optional[Path], carrier: Optional[Carrier]
                 ) -> None:
    """What the warm run wrote into the cache root: a layer that did, missed."""
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
        explain_identical_recompiles(res.layers["kernels"], fs.identical_triton_recompiles(
            triton_dir, warm_files["kernels"]), cc, wc)
    if warm_files.get("other"):
        res.notes.append(f"warm run wrote {len(warm_files['other'])} file(s) no cache layer "
                         f"explains: " + ", ".join(warm_files["other"][:5]))


def rebuilt_kernels(paths: List[str], carrier: Carrier) -> str:
    objects = [p for p in paths if p.endswith(".so")]
    return (f"the warm process rebuilt {len(objects)} C++ kernel object(s) and "
            f"{len(paths) - len(objects)} other kernel file(s) that {carrier.name} did not "
            f"carry" + (f" ({carrier.why})" if carrier.why else "") + ": "
            + ", ".join(p.rsplit("/", 1)[-1] for p in (objects or paths)[:5]))


def judge_loaded(nodeid: str, cold: RecordLike, warm: RecordLike, warm_new: List[str],
                 timings: Dict[str, Optional[float]], carrier: Carrier) -> CheckResult:
    """A warm process that loaded a compiled artifact instead of calling torch.compile
    (aot, aoti): it must compile nothing at all, and write no kernel. The cache layers
    are not how it starts warm, so each says n/a, except the kernels it rebuilt."""
    c, w = PhaseRecord.from_json(cold), PhaseRecord.from_json(warm)
    wc = w.cache
    res = CheckResult(nodeid=nodeid, verdict="pass", device=w.device,
                      device_name=w.device_name, form=w.form, versions=w.versions,
                      timings=timings)
    for layer in layers.LAYERS:
        res.layers[layer] = LayerVerdict(state="n/a",
                                         reasons=[f"not used: {carrier.name} is loaded"])
    events = {"Dynamo frame(s) traced": wc.counter("frames", "total"),
              "FX graph cache miss(es)": wc.counter("inductor", "fxgraph_cache_miss"),
              "AOTAutograd cache miss(es)": wc.counter("aot_autograd", "autograd_cache_miss"),
              "Triton kernel(s) compiled": wc.kernels.triton_compiled or 0}
    compiled = [f"{n} {what}" for what, n in events.items() if n]
    if compiled:
        res.problems.append(f"compile: the warm process compiled after loading {carrier.name}: "
                            + ", ".join(compiled))
    kernels = layers.by_layer(warm_new).get("kernels") or []
    if kernels:
        lv = res.layers["kernels"]
        lv.state, lv.files, lv.warm = "miss", kernels, f"{len(kernels)} new file(s)"
        lv.reasons = [rebuilt_kernels(kernels, carrier)]
        res.problems.append(f"kernels: miss - {lv.reasons[0]}")
    other = [p for p in warm_new if p not in kernels]
    if other:
        res.notes.append(f"the warm process wrote {len(other)} other file(s) into its cache "
                         f"root: " + ", ".join(other[:5]))
    outputs(res, c, w)
    return res.finalize()


def counter(rec: Union[Dict[str, Any], CacheRecord], group: str, name: str) -> int:
    """A torch counter of a phase's cache record (`CacheRecord.counter`)."""
    return CacheRecord.from_json(rec).counter(group, name)
