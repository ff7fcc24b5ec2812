"""False hits between variants (--compile-cache-share-variants): an entry one variant
wrote into the cache they share, loaded by another whose key is blind to what differs
between them, so the loader computes the writer's numbers.

The rule reads a variant's turn over the shared cache: its outputs there against its
own private cold run's (bitwise, else the float64 noise rule: `compare_cold`), and what
the controller's ledger says it loaded of the others' entries (`PhaseRecord.variants`,
controller/variants.py). Loaded and different is a false hit, named with the entry,
its writer, what differs between the two variants and the key's components (what the
key lacks is what differs and appears in none of them). Loaded and equal is what a
shared cache is for: said, and passed. Pure: no torch, no pytest.
"""
from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional

from pytest_compilecache.layers import keys
from pytest_compilecache.layers.keys import EXTENSION
from pytest_compilecache.judge.outputs import as_written, failed_names
from pytest_compilecache.model import CheckResult
from pytest_compilecache.wire import PhaseRecord

# AOTAutograd's entry is what a warm start loads first (it names the FX entries it
# needs), so a false hit is named by it where there is one
_ORDER = ("aot_autograd", "fx_graph")
FIX = ("put what differs into the key (a custom graph pass's uuid(), a custom op's fake "
       "implementation, a config field the key hashes) or give the variants separate cache "
       "dirs")
_UNSET = re.compile(r"None|False|\b0\b|[\s()\[\]{},'\"]")


def judge_shared(res: CheckResult, shared: PhaseRecord) -> None:
    """Add the shared turn's verdict to the check's result (problems, notes, `shared`)."""
    seen = shared.variants or {}
    me = seen.get("variant") or {}
    loaded: Dict[str, Dict[str, Any]] = seen.get("loaded") or {}
    cmp = shared.compare_cold
    res.outputs["shared_vs_cold"] = as_written(cmp, failed_names(cmp)) or {}
    writers = _writers(loaded.values())
    res.shared = {
        "variant": me.get("id") or me.get("nodeid"),
        "loaded": [{"layer": e.get("layer"), "graph": e.get("graph"), "key": key,
                    "backward": e.get("backward"),
                    "writer": (e.get("writer") or {}).get("nodeid")}
                   for key, e in _ordered(loaded)],
        "shared_by": 1 + len(writers) if loaded else 1,
        "other_writers": seen.get("writers") or [],
        "outputs_equal": None if cmp is None else bool(cmp.ok),
    }
    if cmp is None:
        res.problems.append("shared cache: the turn over the cache the variants share made no "
                            "comparison with this variant's own cold run")
        return
    if not cmp.ok and loaded:  # proven whatever else the turn could not do
        first = cmp.mismatches[0]
        res.problems.append(false_hit(me, loaded, f"its outputs over the shared cache differ "
                                      f"from its own private cold run's in "
                                      f"{len(cmp.mismatches)} tensor(s); first {first.name}: "
                                      f"{first.message}"))
        return
    unjudged = turn_faults(seen)
    if unjudged:  # outputs alone would pass a false hit the turn could not reach
        res.problems[:0] = unjudged
        res.fault = True
        return
    if not cmp.ok:
        first = cmp.mismatches[0]
        res.problems.append(
            f"shared cache: its outputs over the shared cache differ from its own private "
            f"cold run's in {len(cmp.mismatches)} tensor(s); first {first.name}: "
            f"{first.message}, although it loaded no entry another variant wrote (a "
            f"nondeterministic compile, or state outside the cache keys that the variants "
            f"share through the cache directory)")
        return
    if loaded:
        names = ", ".join(_variant_name(w) for w in writers)
        res.notes.append(f"shared cache: shared by {len(writers) + 1} variants: loaded "
                         f"{len(loaded)} entr(ies) that {names} wrote, and computed what its own "
                         f"private cold run did ({cmp.mode}): what a shared cache is for")
        return
    missed = why_missed(shared, seen.get("not_loaded") or {})
    if seen.get("writers"):
        res.notes.append(f"shared cache: loaded none of the entries the other variants wrote "
                         f"({len(seen['writers'])} before it)"
                         + (f": {missed}" if missed else "") + "; its outputs there equal its "
                         f"own private cold run's ({cmp.mode})")
    else:
        res.notes.append("shared cache: the first variant over the cache its function's "
                         "variants share: it wrote what the others may load")


def turn_faults(seen: Mapping[str, Any]) -> List[str]:
    """What the turn could not write or read that the scenario needs, each with the file
    and the fix: its entries the shared root lacks (its own cold run saved them), the
    entries another variant could not save under the keys this one compiled (it would
    have loaded them), a ledger it could not write."""
    out: List[str] = []
    root = seen.get("root") or "the shared root"
    unsaved: Dict[str, Dict[str, Any]] = seen.get("unsaved") or {}
    if unsaved:
        out.append(f"shared cache: this turn could not save {_entries(unsaved)} in the cache "
                   f"the variants share ({_dirs(unsaved, root)}), though its own cold run "
                   f"saved them: the variants after it cannot load them, so a false hit "
                   f"between them would pass unseen. {SAVE_FIX}")
    missing: Dict[str, Dict[str, Any]] = seen.get("missing") or {}
    if missing:
        writers = ", ".join(_variant_name(w) for w in _writers(missing.values()))
        out.append(f"shared cache: this turn compiled {_entries(missing)} under the keys that "
                   f"{writers} compiled before it and could not save "
                   f"({_dirs(missing, root)}): saved, they would have been loaded here, "
                   f"and whether they give this variant's numbers is unknown. {SAVE_FIX}")
    if seen.get("unusable"):
        out.append(f"shared cache: {seen['unusable']}")
    return out


SAVE_FIX = ("Fix: give the shared root room and write access for the session (a quota, a "
            "full disk, a read-only dir?), or put the session's roots elsewhere "
            "(--compile-cache-root), and run it again")


def _entries(entries: Mapping[str, Dict[str, Any]]) -> str:
    first, e = _ordered(entries)[0]
    more = len(entries) - 1
    return (f"the {e.get('layer')} entry {first[:16]}… of graph {e.get('graph')}"
            + (f" and {more} more" if more else ""))


def _dirs(entries: Mapping[str, Dict[str, Any]], root: str) -> str:
    """Where torch keeps the entries' layers in the shared root (controller/written.entry_dir)."""
    layers = sorted({str(e.get("layer")) for e in entries.values()})
    return ", ".join(f"{root}/inductor/" + ("aotautograd" if n == "aot_autograd" else "fxgraph")
                     for n in layers)


def false_hit(me: Mapping[str, Any], loaded: Mapping[str, Dict[str, Any]], differs: str) -> str:
    """The failure, a line each: who loaded what entry another wrote, what differs,
    what the key holds, and the fix (one line of ~900 characters was not read)."""
    key, entry = _ordered(loaded)[0]
    writer = entry.get("writer") or {}
    more = len(loaded) - 1
    diff = _param_diff(writer.get("params") or {}, me.get("params") or {})
    comps = _components(entry.get("components") or [], entry.get("component_count"))
    return "\n    ".join((
        f"false hit: this variant ({_variant_name(me)}) loaded the {entry.get('layer')} "
        f"entry {key[:16]}… of graph {entry.get('graph')}"
        f"{' (backward)' if entry.get('backward') else ''} that {_variant_name(writer)} "
        f"wrote (same key){f', and {more} more of its entries' if more else ''}",
        f"outputs: {differs}",
        f"what differs: the variants differ in {diff}, which the key cannot see",
        f"what the key holds: {comps}",
        f"fix: {FIX}"))


def why_missed(shared: PhaseRecord, others: Mapping[str, Dict[str, Any]]) -> Optional[str]:
    """Which components kept this variant's keys from the others' entries (its first
    missed graph beside the other variant's entry for the same graph)."""
    for gid, events in shared.cache.graphs.items():
        for layer in _ORDER:
            for mine in events.entries(layer):
                if mine.state != "miss":
                    continue
                twins = [e for e in others.values()
                         if e.get("layer") == layer and e.get("graph") == gid]
                twin = keys.best_match(mine, twins)
                if twin is None:
                    continue
                comps = keys.differing_components(twin, mine)
                if comps:
                    names = ", ".join(c["component"] for c in comps[:4])
                    return (f"their {layer} keys of graph {gid} differ in {names} (from "
                            f"{_variant_name(twin.get('writer') or {})}'s), so each variant "
                            f"compiled its own")
    return None


def _ordered(loaded: Mapping[str, Dict[str, Any]]) -> List[Any]:
    return sorted(loaded.items(), key=lambda kv: (
        _ORDER.index(kv[1].get("layer")) if kv[1].get("layer") in _ORDER else len(_ORDER),
        str(kv[1].get("graph")), bool(kv[1].get("backward"))))


def _writers(entries: Any) -> List[Dict[str, Any]]:
    out: Dict[str, Dict[str, Any]] = {}
    for e in entries:
        w = e.get("writer") or {}
        out.setdefault(str(w.get("nodeid")), w)
    return list(out.values())


def _variant_name(v: Mapping[str, Any]) -> str:
    vid = v.get("id")
    return f"variant [{vid}]" if vid else str(v.get("nodeid") or "another variant")


def _param_diff(a: Mapping[str, str], b: Mapping[str, str]) -> str:
    """The parameters whose values differ, writer's -> loader's."""
    names = [n for n in sorted(set(a) | set(b)) if a.get(n) != b.get(n)]
    if not names:
        return "their parameter ids only"
    return ", ".join(f"{n} ({a.get(n, '-')} -> {b.get(n, '-')})" for n in names[:6])


def _components(components: List[Any], count: Optional[int] = None,
                who: str = "variants") -> str:
    """What the key holds, as the fix needs it: the user's extension points that are set
    (custom passes by their uuid(), custom partitioners...) with their values, and how
    many components there are (`count`: all of them, where the ledger kept only those)."""
    named = [c for c in components if isinstance(c, (list, tuple)) and len(c) >= 3]
    total = count if count is not None else len(named)
    if not total:
        return "its key components were not recorded (torch did not log them)"
    ext = [c for c in named if EXTENSION.search(str(c[0])) and _is_set(str(c[2]))]
    if not ext:
        return (f"none of its {total} key components comes from a custom pass or partitioner "
                f"(they are graph code, input metadata, Inductor's config, torch's version...), "
                f"so what differs lives in code the key does not hash (an allow_in_graph "
                f"callable's body, a custom op's Python implementation or backward)")
    shown = ", ".join(f"{c[0]}={_cut(str(c[2]))!r}" for c in ext[:4])
    return (f"of its {total} key components, the extension points that are set are {shown}, "
            f"equal for both {who} as the key is (the rest are graph code, input "
            f"metadata, Inductor's config, torch's version...)")


def _is_set(value: str) -> bool:
    """A component's value says something (not None, an empty tuple of Nones...)."""
    return bool(_UNSET.sub("", value))


def _cut(text: str, n: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[:n - 1] + "…"
