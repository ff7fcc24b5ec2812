"""The outputs of a check: warm against cold (a stale or corrupt entry returns other
numbers), each compiled run against eager, and the tensors that change with the random
seed. Pure: reads typed phase records; the comparisons go to the report as written."""
from __future__ import annotations

from typing import AbstractSet, Any, Callable, Dict, List, Optional, Set, Tuple, Union

from pytest_compilecache import layers
from pytest_compilecache.model import CheckResult
from pytest_compilecache.wire import ColdComparison, EagerComparison, Mismatch, PhaseRecord
from pytest_compilecache.terms import USABLE_REL, is_gradient

# why the tensors child/randomness.py finds cannot be compared with eager
WHY_RANDOM = "they change with the random seed (dropout, stochastic depth, random noise)"
# the generators whose states a phase records at each compiled call (child/replay.py)
GENERATORS = {"torch": "torch's CPU generator", "cuda": "torch's CUDA generators",
              "random": "Python's random", "numpy": "numpy's global generator",
              "inputs": "the call's input shapes"}

# warm-vs-cold differences below this are the size of reordered float atomics, not of a
# wrong kernel (seen on an H200: 1.8e-7 in BERT's embedding grad, 4.2e-7 in MobileNet's)
TINY_DIFF = 1e-5


KEPT_WHEN_OK = 3  # a passing comparison's tensors that came closest to their limit


def as_written(cmp: Union[None, ColdComparison, EagerComparison],
               keep: AbstractSet[str] = frozenset()) -> Optional[Dict[str, Any]]:
    """The comparison for the report. Where it passed, its per-tensor lists keep three
    tensors and a count: those a float64 run judged (every escalated gradient of a
    training check: 62 of resnet18's 63 tensors on an H100, 21 KB of its 39 KB report)
    and those within noise warm vs cold, the three closest to their limit
    (`escalated_count`, `within_noise_count`); those that change with the seed (BERT
    with dropout: 200, 17 KB per phase; `outputs.random` names them all), the three the
    seed moved least (`random_count`). A failed comparison keeps every tensor, and a
    passing one every tensor named in `keep` (those another comparison of the check
    failed on: cold's numbers explain a warm failure)."""
    if cmp is None:
        return None
    raw = cmp.raw
    if not raw.get("ok"):
        return raw
    out = dict(raw)
    f64 = raw.get("float64")
    if isinstance(f64, dict) and len(f64.get("escalated") or []) > KEPT_WHEN_OK:
        out["float64"] = {**f64, "escalated": _kept(f64["escalated"], _margin("rmse"), keep),
                          "escalated_count": len(f64["escalated"])}
    noise = raw.get("within_noise")
    if isinstance(noise, list) and len(noise) > KEPT_WHEN_OK:
        out["within_noise"] = _kept(noise, _margin("diff_rmse"), keep)
        out["within_noise_count"] = len(noise)
    random = raw.get("random")
    if isinstance(random, list) and len(random) > KEPT_WHEN_OK:
        # outputs.random names them all; kept here: those the seed moved least
        out["random"] = _kept(random, lambda v: -float(v.get("seed_moved_rel") or 0.0), keep)
        out["random_count"] = len(random)
    return out


def _margin(err: str) -> Callable[[Dict[str, Any]], float]:
    """How close a row came to its limit (as float64.worst ranks them)."""
    def margin(v: Dict[str, Any]) -> float:
        limit = v.get("limit") or 0.0
        return float(v.get(err) or 0.0) / limit if limit else float("inf")
    return margin


def _kept(rows: List[Dict[str, Any]], rank: Callable[[Dict[str, Any]], float],
          keep: AbstractSet[str]) -> List[Dict[str, Any]]:
    """The KEPT_WHEN_OK rows that rank highest, and every row named in `keep`."""
    top = {id(v) for v in sorted(rows, key=rank, reverse=True)[:KEPT_WHEN_OK]}
    return sorted((v for v in rows if id(v) in top or v.get("name") in keep),
                  key=rank, reverse=True)


def fresh_reference(res: CheckResult, fresh: Optional[PhaseRecord],
                    what: str) -> Optional[ColdComparison]:
    """A scenario's fresh compile as the warm run's reference (the deploy scenario, a
    warm run on another GPU): its comparison into the report, a problem where it made
    none; the scenario says what a difference means."""
    cmp = fresh.compare_cold if fresh is not None else None
    res.outputs["fresh_vs_warm"] = as_written(cmp, failed_names(cmp)) or {}
    if cmp is None:
        res.problems.append(f"outputs: {what} made no comparison with the warm run")
    return cmp


def failed_names(*cmps: Union[None, ColdComparison, EagerComparison]) -> Set[str]:
    """The tensors any of these comparisons failed on."""
    return {m.name for c in cmps if c is not None for m in c.mismatches}


NO_COLD = "outputs: the warm run produced no comparison with cold"


def outputs(res: CheckResult, cold: PhaseRecord, warm: PhaseRecord,
            cold_is_other_code: bool = False) -> None:
    cmp_cold = warm.compare_cold
    failed = failed_names(cmp_cold, cold.compare_eager, warm.compare_eager)
    res.outputs = {"count": len(warm.outputs), "warm_vs_cold": as_written(cmp_cold, failed),
                   "cold_vs_eager": as_written(cold.compare_eager, failed),
                   "warm_vs_eager": as_written(warm.compare_eager, failed)}
    if cmp_cold is None:
        res.problems.append(NO_COLD)
    elif not cmp_cold.ok:
        _warm_differs(res, cmp_cold, cold_is_other_code)
    _within_noise(res, cmp_cold)
    _incomparable(res, cold, warm)
    for phase, cmp in (("cold", cold.compare_eager), ("warm", warm.compare_eager)):
        if cmp is not None:
            _against_eager(res, phase, cmp)
    _random(res, cold, warm, cold_is_other_code)
    if not warm.outputs:
        res.outputs["unseen"] = unseen(warm)


RECORD = "compile_cache.record(name, value)"


def unseen(warm: PhaseRecord) -> str:
    """Why a check compared no output, in one line (the terminal says it for a passing
    check too: `equal (0 compared)` read as a pass): the compiled calls it saw returned
    no tensor, or it saw none, and Dynamo compiled frames all the same, or none."""
    calls, frames = warm.compiled_calls, warm.cache.counter("frames", "total")
    lead, tail = "no output seen", f"nothing was compared; record values with {RECORD}"
    if calls:
        return (f"{lead}: its {calls} compiled call(s) returned no tensor and the test "
                f"recorded none: {tail}")
    if frames:
        return (f"{lead}: Dynamo compiled {frames} frame(s), through no compiled callable "
                f"the plugin saw (one made before the phase began, at a conftest's "
                f"import?), and the test recorded none: {tail}")
    return f"{lead}: Dynamo compiled 0 frames and the test recorded none: {tail}"


def nothing_compiled(res: CheckResult, cold: PhaseRecord, warm: PhaseRecord) -> None:
    """Outputs of a check where Dynamo compiled 0 frames in both runs: the calls ran
    eagerly, so what was compared is eager code; said where the comparisons are."""
    frames = [r.cache.counter("frames", "total") for r in (cold, warm)]
    if warm.outputs and frames == [0, 0]:
        res.outputs["unseen"] = (f"Dynamo compiled 0 frames in either run: the "
                                 f"{len(warm.outputs)} tensor(s) compared came from eager "
                                 f"code, not from compiled code")


def _warm_differs(res: CheckResult, cmp_cold: ColdComparison, cold_is_other_code: bool) -> None:
    names = ", ".join(m.name + (f" ({m.message})" if m.message else "")
                      for m in cmp_cold.mismatches[:4])
    if cold_is_other_code:
        res.notes.append(f"outputs differ from the baseline's (information: the cold run "
                         f"was another commit; a stale entry shows as warm compiled vs "
                         f"eager of this commit): {names}")
        return
    # beyond a float64 run's noise is never "tiny", whatever its size
    tiny = all(m.max_abs_diff is not None and m.max_abs_diff < TINY_DIFF
               and m.float64 is None and not m.random
               for m in cmp_cold.mismatches)
    keyed = [res.layers[k].state for k in layers.KEYED if k in res.layers]
    # an artifact path (keyed layers n/a) loaded its answer: that can be stale too
    loaded = "hit" in keyed or not any(st in ("miss", "bypass") for st in keyed)
    why = (" - tiny: a nondeterministic kernel (atomic adds in a backward, say) is "
           "likelier than a stale entry; if so, allow it with "
           "--compile-cache-warm-tolerance=ATOL,RTOL" if tiny
           else " - a stale or corrupt cache entry returns other numbers"
           + served(res, cmp_cold.mismatches[0].name) if loaded
           else " - no cache entry answered (the graph layers missed, above): the "
                "warm process compiled another graph, which computes other numbers "
                "(a value captured per process, such as a random constant?)")
    res.problems.append(f"outputs: warm differs from cold ({cmp_cold.mode}): {names}{why}")


def served(res: CheckResult, first: str) -> str:
    """Which entries the warm run loaded, where a stale one could have come from: a
    gradient's first, the backward graphs'; each by layer, graph and key (the report's
    `graphs` rows, `pytest-compilecache show` lists them)."""
    hits = [g for g in res.graphs if g.get("phase") == "warm" and g.get("state") == "hit"]
    if not hits:
        return ""
    hits.sort(key=lambda g: bool(g.get("backward")) != is_gradient(first))
    said = [f"{g.get('layer')} {g.get('compile_id')}"
            + (" backward" if g.get("backward") else "")
            + f" (key {str(g.get('key'))[:12]})" for g in hits[:3]]
    more = f" and {len(hits) - 3} more" if len(hits) > 3 else ""
    return f"; the warm run loaded {', '.join(said)}{more}"


def _within_noise(res: CheckResult, cmp_cold: Optional[ColdComparison]) -> None:
    noise = cmp_cold.within_noise if cmp_cold is not None else []
    if not noise:
        return
    closest = sorted(noise, key=lambda v: (v.diff_rmse or 0.0) / v.limit if v.limit
                     else float("inf"), reverse=True)  # as the report keeps them
    shown = ", ".join(f"{v.name} (max abs diff {v.max_abs_diff:.3g}; RMSE "
                      f"{v.diff_rmse:.3g}, allowed {v.limit:.3g})" for v in closest[:3])
    rule = ("of a float64 run" if not any(v.random for v in noise) else
            "(a float64 run's, or float32's noise floor for tensors that change with the "
            "random seed)")
    near_zero = [v.name for v in noise if v.no_reference]
    if near_zero:  # zero in exact math: the float64 run cannot tell their noise apart
        rule += (f" ({len(near_zero)} of them near zero, where the float64 run is no "
                 f"reference: within assert_close's defaults too)")
    res.notes.append(f"warm differs from cold bitwise in {len(noise)} tensor(s) within "
                     f"arithmetic noise {rule} (a nondeterministic kernel, e.g. "
                     f"atomic adds): {shown}")


def parted(cold: List[Dict[str, str]], warm: List[Dict[str, str]]
           ) -> Optional[Tuple[int, List[str]]]:
    """Where two phases' random-state trails first differ: the compiled call's index
    and the generators, by name."""
    for k, (a, b) in enumerate(zip(cold, warm)):
        names = [GENERATORS.get(n, n) for n in sorted(set(a) | set(b)) if a.get(n) != b.get(n)]
        if names:
            return k, names
    return None


def _incomparable(res: CheckResult, cold: PhaseRecord, warm: PhaseRecord) -> None:
    """Tensors of other shapes in two runs: where the runs' random states or a compiled
    call's input shapes parted before them (the trails), they were computed from other
    inputs and cannot be compared, which says nothing of a cache (a note). Where nothing
    parted, an entry answered for another shape, or the inputs came from outside the
    generators: that fails, saying both, for a stale entry must never pass."""
    cmp = warm.compare_cold
    if cmp is not None and cmp.incomparable:
        where = parted(cold.rng_trail, warm.rng_trail)
        shown = _shapes(cmp.incomparable)
        if where is not None:
            note(res, f"outputs: {len(cmp.incomparable)} tensor(s) cannot be compared warm vs "
                      f"cold: {shown} - the runs computed on different inputs (not a cache "
                      f"symptom): {' and '.join(where[1])} parted before compiled call "
                      f"{where[0]} (a generator the test re-seeds from the clock or the OS?)")
        else:
            res.problems.append(
                f"outputs: warm returned other shapes than cold: {shown}, though "
                + ("every random state and every compiled call's input shapes were equal "
                   "(the first 64 calls): " if cold.rng_trail and warm.rng_trail else "")
                + "an entry answered for another shape (a stale entry, a guard too loose), "
                "or the inputs came from outside the random generators (a file, the clock)")
    for phase, rec in (("cold", cold), ("warm", warm)):
        ecmp = rec.compare_eager
        if ecmp is None or not ecmp.incomparable:
            continue
        shown = _shapes(ecmp.incomparable)
        gens = [GENERATORS.get(n, n) for n in rec.eager_parted.get("generators") or []]
        if gens:
            note(res, f"outputs: {len(ecmp.incomparable)} tensor(s) of the {phase} run cannot "
                      f"be compared with eager: {shown} - the eager re-run computed on "
                      f"different inputs: {' and '.join(gens)} differed from the compiled "
                      f"run's before compiled call {rec.eager_parted.get('call')} (the body "
                      f"re-seeds from the clock or the OS?)")
        else:
            res.problems.append(
                f"outputs: {phase} compiled returned other shapes than eager: {shown}, with "
                f"the same random states and input shapes at every compiled call: wrong "
                f"code (a miscompile or a stale entry), or inputs from outside the random "
                f"generators (a file, the clock)")


def _shapes(rows: List[Mismatch]) -> str:
    return ", ".join(f"{m.name} ({m.message})" for m in rows[:3]) + (
        f" (+{len(rows) - 3} more)" if len(rows) > 3 else "")


def _against_eager(res: CheckResult, phase: str, cmp: EagerComparison) -> None:
    if cmp.ok is None and cmp.note:
        note(res, f"eager comparison skipped: {cmp.note}")
        return
    if not cmp.ok:
        first = cmp.mismatches[0]
        msg = first.message.splitlines()[0] if first.message else ""
        res.problems.append(f"outputs: {phase} compiled differs from eager in "
                            f"{len(cmp.mismatches)} tensor(s); first {first.name}: {msg}")
    f64 = cmp.float64
    ungated = cmp.ungated_gradients
    if ungated:
        why = (f"their float64 run is no reference (eager misses it by up to "
               f"{f64.unusable_miss or 0:.0%} RMS, over the {USABLE_REL:.0%} cut)"
               if f64.available else
               f"no float64 reference ({f64.note or 'none made'})")
        note(res, f"{phase}: {len(ungated)} gradient(s) that differ from eager are not "
                  f"gated: {why}; first {ungated[0]}, largest norm-relative difference "
                  f"{cmp.gradient_rel_error:.3g}")


def _random(res: CheckResult, cold: PhaseRecord, warm: PhaseRecord,
            cold_is_other_code: bool = False) -> None:
    """Say which tensors eager cannot judge because they change with the random seed,
    and what gates them instead: cold, or where cold was another commit's code (the
    deploy scenario), a fresh compile of this commit's."""
    for rec in (warm, cold):
        if rec.random_note:
            note(res, rec.random_note)
    cmp = warm.compare_eager or cold.compare_eager
    names = [r.name for r in cmp.random] if cmp is not None else []
    res.outputs["random"] = names
    if names:
        total = cmp.total if cmp is not None and cmp.total is not None else len(names)
        gate = ("they are gated against a fresh compile of this commit's code instead: the "
                "same seed and compiled graph draw the same numbers" if cold_is_other_code
                else "they are gated warm vs cold instead: the same seed and compiled graph "
                "draw the same numbers" if warm.compare_cold is not None
                else "nothing else gates them here")
        note(res, f"compiled vs eager: {len(names)} of {total} tensors "
                  f"not comparable: {WHY_RANDOM}: {', '.join(names[:4])}"
                  + (f" (+{len(names) - 4} more)" if len(names) > 4 else "") + f"; {gate}")


def note(res: CheckResult, text: str) -> None:
    """A note once."""
    if text not in res.notes:
        res.notes.append(text)
