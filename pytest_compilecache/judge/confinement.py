"""Did a phase's caches stay inside its private root? The controller's rules.

The phase child puts back the cache settings the test's code changed and says where
torch's and Triton's caches were when they lay outside the root (child/confinement.py).
Here, the phase's error: caches kept outside the root (`escaped`), or a phase that
started on an empty root and still hit a cache layer, whatever moved it (`foreign_hits`,
`not_cold`): it cannot tell a cold start from a warm one. Pure: reads phase records.
"""
from __future__ import annotations

from typing import List

from pytest_compilecache.terms import PRIVATE_FIX
from pytest_compilecache.wire import PhaseRecord, RecordLike


def foreign_hits(rec: RecordLike) -> List[str]:
    """A phase that started on an empty root hit these: FX/AOTAutograd entries it did
    not write itself earlier in the phase, a PGO profile read before it wrote any."""
    cache = PhaseRecord.from_json(rec).cache
    graphs = cache.graphs
    out = []
    for layer in ("fx_graph", "aot_autograd"):
        entries = [e for g in graphs.values() for e in g.entries(layer)]
        written = {e.key for e in entries if e.state == "miss"}
        foreign = sorted({str(e.key) for e in entries
                          if e.state == "hit" and e.key not in written})
        if foreign:
            out.append(f"{layer} hit {len(foreign)} entr(ies) this process never wrote: "
                       + ", ".join(k[:16] for k in foreign[:3]))
    resets = (cache.dynamo.resets or 0) + sum(cache.dynamo.reset_callers.values())
    read = sum(g.pgo.read for g in graphs.values())
    if read and not resets:
        out.append(f"dynamo_pgo read {read} profile(s) before writing any")
    return out


def not_cold(hits: List[str]) -> str:
    """The error of a phase that began on an empty cache root and hit a layer."""
    return ("was not cold: it began on an empty private cache root and still loaded cache "
            "entries (" + "; ".join(hits) + "): its caches were not private (a setting the "
            "test's code changed: a cache dir, a remote cache turned on in code), so this "
            "check cannot tell a cold start from a warm one")


def escaped(lines: List[str]) -> str:
    """The error of a phase whose caches were outside its root."""
    return ("kept its caches outside the check's private root, so its cold and warm runs "
            "were not the check's own: " + "; ".join(lines) + f"; {PRIVATE_FIX}")
