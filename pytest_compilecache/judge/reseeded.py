"""The restart under other Python-side draws (the `reseeded` phase, child/replay.py):
does a value the test drew from Python's `random` or numpy's global generator end in a
compiled graph?

Both judged phases seed those generators alike, so a drawn constant looks the same to
cold and warm; production seeds them per process. The reseeded phase restarts over the
warm root with their seed changed and torch's not. A graph it looked up again and
missed, with the graph's inputs unchanged and its key drifted, holds a drawn value:
every real restart misses it. One whose inputs changed (shapes, dtypes: the
`example_inputs` component) computes on other test data, which a real restart of the
test draws too: a note, not a verdict on the model. Pure: reads typed phase records.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional

from pytest_compilecache.layers import keys
from pytest_compilecache.model import CheckResult
from pytest_compilecache.paths.base import last_exception
from pytest_compilecache.wire import CacheEntry, PhaseRecord

KEYED = ("fx_graph", "aot_autograd")
# the key components of a graph's inputs' shapes and dtypes, one per input
# (example_inputs[2]: FxGraphHashDetails, and AOTAutogradCacheDetails after it)
INPUTS = "example_inputs"
FIX = ("draw it from a generator seeded in code (random.Random(seed)), or pass it in as "
       "a tensor (a buffer), which the graph reads instead of baking in")


def drew_in_the_test(recs: Iterable[PhaseRecord]) -> bool:
    """Whether the test drew from Python's `random` or numpy's generator: the cue for
    the reseeded restart. A library imported after the seed (in a fixture, on a session's
    first run, before the preloaded interpreters learned it) may draw as it imports:
    transformers did, and BERT's session paid a reseeded phase of 4.6 s for it. Where a
    phase imported no library after its seed (its interpreter had them already), its
    draws are the test's alone, and those phases decide; else every phase does."""
    recs = list(recs)
    clean = [r for r in recs if not r.imported_after_seed]
    return any(r.drew for r in (clean or recs))


def judge_reseeded(res: CheckResult, cold: PhaseRecord, reseeded: PhaseRecord) -> None:
    """Add to `res` what the reseeded restart showed: a problem per layer where a drawn
    value ends in a graph, a note where only the test data changed."""
    drew = " and ".join(_generator(g) for g in reseeded.drew or cold.drew) or "them"
    other_data = 0
    for layer in KEYED:
        cold_entries = cold.cache.entries(layer)
        found: List[str] = []
        for e in reseeded.cache.entries(layer):
            twin = keys.best_match(e, cold_entries) if e.state == "miss" else None
            if twin is None or twin.key == e.key:
                continue  # a hit, or a miss the warm phase's rule already explains
            names = [d["component"] for d in keys.differing_components(twin, e)]
            if any(n.split("[")[0] == INPUTS for n in names):  # example_inputs[2]
                other_data += 1
            else:
                found.append(_drifted(e, twin))
        if found:
            _fail(res, layer, drew, found)
    if other_data:
        res.notes.append(
            f"a restart whose draws from {drew} differ (another seed) computed on other "
            f"inputs ({other_data} graph(s) with other shapes or dtypes missed): the test's "
            f"own data, which a real restart of it draws too")


def _fail(res: CheckResult, layer: str, drew: str, found: List[str]) -> None:
    lv = res.layers.get(layer)
    why = (f"a restart whose draws from {drew} differ misses (production seeds them per "
           f"process; the check seeds cold and warm alike): " + "; ".join(found[:3])
           + f" - a value drawn from {drew} ends in the compiled graph, so every restart "
           f"compiles it again; {FIX}")
    if lv is not None:
        lv.state = "miss"
        lv.reasons.insert(0, why)
    res.problems.append(f"{layer}: miss - {why}")


def _drifted(e: CacheEntry, twin: CacheEntry) -> str:
    """The graph, what drifted, and the first changed lines of its code."""
    where = f"graph {e.compile_id}{' (backward)' if e.backward else ''}"
    diffs = keys.differing_components(twin, e)
    gm = next((d for d in diffs if d["component"] == "gm"), None)
    what = ", ".join("gm (graph code differs)" if d["component"] == "gm" else d["component"]
                     for d in diffs[:4])
    lines = _changed_lines(gm)
    return f"{where}: key drifted: {what}" + (f" ({' / '.join(lines)})" if lines else "")


def _changed_lines(gm: Optional[Dict[str, Any]]) -> List[str]:
    """The first lines of graph code the reseeded restart changed."""
    if gm is None:
        return []
    diff = keys.graph_code_diff(gm["cold"], gm["warm"], labels=("seeded", "reseeded"))
    changed = [x.strip() for x in diff if x[:1] in "+-" and x[:3] not in ("+++", "---")]
    return [x[:120] for x in changed[:2]]


def _generator(name: str) -> str:
    return "Python's `random`" if name == "random" else "numpy's global generator"


def unjudged(phase: str, failure: Optional[CheckResult]) -> str:
    """A reseeded restart that failed: the test may hold only for the draws of the
    check's seed, so it is said, never the verdict."""
    why = last_exception(failure.error or "") if failure is not None else "it left no record"
    return (f"the {phase} phase (a restart whose draws from Python's random and numpy "
            f"differ) failed, so whether a drawn value ends in a graph was not judged: {why}")
