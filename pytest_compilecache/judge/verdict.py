"""Per-layer verdict of one check from its cold and warm phase records.

Pure: takes the children's records (typed, `wire.PhaseRecord`, or as the JSON they
wrote) and the file snapshots, returns a CheckResult. A layer is `hit`, `miss`, `bypass`,
`off` (a setting switched it off: the test's code fails the check) or `n/a` (torch lacks
it, or the workload never reached it); n/a is never a pass on its own, and a check whose
warm run shows no cache event at all fails.
Each layer of the registry (layers/) judges its own records and says what the files the
warm run wrote for it mean; here are only the rules across layers: the outputs
(outputs.py), the recompiles (recompiles.py), a warm run with no cache event at all.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Union

from pytest_compilecache import files as fs
from pytest_compilecache import layers
from pytest_compilecache.judge import recompiles
from pytest_compilecache.judge.outputs import nothing_compiled, note, outputs
from pytest_compilecache.layers.base import Carrier, LayerInputs
from pytest_compilecache.model import CheckResult, LayerVerdict
from pytest_compilecache.wire import CacheRecord, PhaseRecord, RecordLike


def recorded(nodeid: str, cold: RecordLike, timings: Dict[str, Optional[float]]
             ) -> CheckResult:
    """A cold-only run that records keys (--compile-cache-manifest-only): no verdict."""
    rec = PhaseRecord.from_json(cold)
    res = CheckResult(nodeid=nodeid, verdict="recorded", device=rec.device,
                      device_name=rec.device_name, form=rec.form, versions=rec.versions,
                      timings=timings)
    inputs = LayerInputs(rec.cache, CacheRecord())
    res.graphs = [row for layer in layers.REGISTRY for row in layer.graph_rows(inputs)]
    return res


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
    cold_files, config = layers.by_layer(cold_snap), wc.layer_config
    inputs = {layer.name: LayerInputs(cc, wc, config.get(layer.name),
                                      cold_files.get(layer.name, []), saved, precompiled,
                                      triton_dir, carrier)
              for layer in layers.REGISTRY}
    for layer in layers.REGISTRY:  # each layer as the cold and warm runs' events show it
        res.layers[layer.name], notes = layer.judge(inputs[layer.name])
        res.notes += notes
    _warm_writes(res, layers.by_layer(warm_new), inputs)
    res.graphs = [row for layer in layers.REGISTRY
                  for row in layer.graph_rows(inputs[layer.name])]
    for text in w.notes:  # what the phase itself found worth saying
        note(res, text)
    outputs(res, c, w, cold_is_other_code)
    for layer in layers.REGISTRY:  # each layer's own rule: a miss, a switch set in code
        res.problems += layer.problems(res.layers[layer.name], wc.layer_config.get(layer.name))

    recompiles.judge(res, cc, wc, cold_is_other_code)
    if (not any(lv.state in ("hit", "miss", "bypass") for lv in res.layers.values())
            and not precompiled):  # a miss has its reason above: this is for none at all
        res.problems.append(nothing_cached(cc, wc))
        nothing_compiled(res, c, w)
    return res.finalize()


def nothing_cached(cold: CacheRecord, warm: CacheRecord) -> str:
    """Why no layer saw an event, as far as the records know: Dynamo compiled frames
    (then the caches were off, or the backend was not Inductor), or it compiled none,
    with torch's reason for each frame it skipped."""
    lead = "no cache events at all: the warm run hit no cache layer"
    frames = warm.counter("frames", "total")
    if frames:
        return (f"{lead}, though Dynamo compiled {frames} frame(s) (caches disabled, or a "
                f"backend other than inductor)")
    skipped = warm.dynamo.skipped or cold.dynamo.skipped
    why = (f": torch skipped every frame the compiled calls ran: {'; '.join(skipped[:3])}"
           + (f" (+{len(skipped) - 3} more)" if len(skipped) > 3 else "") if skipped
           else ": torch skipped no frame either (no compiled callable was called?)")
    return (f"{lead}: Dynamo compiled 0 frames (cold: "
            f"{cold.counter('frames', 'total')}){why}")


def _warm_writes(res: CheckResult, warm_files: Dict[str, List[str]],
                 inputs: Dict[str, LayerInputs]) -> None:
    """What the warm run wrote into the cache root: each layer says what its files mean
    (a layer that wrote any, missed); a file no layer owns is a note."""
    for layer in layers.REGISTRY:
        if warm_files.get(layer.name):
            layer.warm_wrote(res.layers[layer.name], warm_files[layer.name], inputs[layer.name])
    if warm_files.get("other"):
        res.notes.append(f"warm run wrote {len(warm_files['other'])} file(s) no cache layer "
                         f"explains: " + ", ".join(warm_files["other"][:5]))


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
    for layer in layers.REGISTRY:
        res.layers[layer.name] = LayerVerdict(state="n/a",
                                              reasons=[f"not used: {carrier.name} is loaded"])
    traced = wc.counter("frames", "total")
    compiled = (([f"{traced} Dynamo frame(s) traced"] if traced else []) +
                [what for layer in layers.REGISTRY for what in layer.load_compiles(wc)])
    if compiled:
        res.problems.append(f"compile: the warm process compiled after loading {carrier.name}: "
                            + ", ".join(compiled))
    warm_files = layers.by_layer(warm_new)
    rebuilt: Set[str] = set()  # the files a layer names as rebuilt, not as others
    for layer in layers.REGISTRY:
        lv, paths = res.layers[layer.name], warm_files.get(layer.name) or []
        if paths and layer.rebuilt(lv, paths, carrier):
            rebuilt.update(paths)
            res.problems += layer.problems(lv, None)
    other = [p for p in warm_new if p not in rebuilt]
    if other:
        res.notes.append(f"the warm process wrote {len(other)} other file(s) into its cache "
                         f"root: " + ", ".join(other[:5]))
    outputs(res, c, w)
    return res.finalize()


def counter(rec: Union[Dict[str, Any], CacheRecord], group: str, name: str) -> int:
    """A torch counter of a phase's cache record (`CacheRecord.counter`)."""
    return CacheRecord.from_json(rec).counter(group, name)
