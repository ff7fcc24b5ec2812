"""Cache-key components: normalise, digest, match a warm entry to its cold twin, and say
which components differ. Pure functions over a phase record's typed cache entries, or
over the manifest's graph rows (plain JSON with the same `key`, `backward` and
`components`)."""
from __future__ import annotations

import difflib
import hashlib
import json
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, TypeVar, Union

from pytest_compilecache.wire import CacheEntry

_ADDR = re.compile(r"0x[0-9a-fA-F]{6,}")
# key components that come from the user's extension points (a custom graph pass's
# uuid(), a custom partitioner): what a key that is blind to a variant's setting carries
EXTENSION = re.compile(r"custom|partitioner", re.I)

Entry = Union[CacheEntry, Mapping[str, Any]]
E = TypeVar("E", bound=Entry)


def _parts(entry: Entry) -> Tuple[Any, Any, List[Any]]:
    """(key, backward, components) of a typed entry, or of a manifest row."""
    if isinstance(entry, CacheEntry):
        return entry.key, entry.backward, entry.components
    return entry.get("key"), entry.get("backward"), entry.get("components") or []


def components_digest(components: List[Any]) -> str:
    """sha256 of the components' canonical JSON: what a report or manifest row keeps of a
    graph that needs no explaining (its ~640 components are ~75 KB), and the name of the
    store's copy of them (history/blobs.py)."""
    text = json.dumps(components, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def normalize_reason(text: Optional[str]) -> str:
    """Bypass reasons embed object addresses; strip them so reasons compare."""
    if not text:
        return ""
    return " ".join(_ADDR.sub("0x…", str(text)).split())


def component_map(entry: Entry) -> Dict[str, List[Any]]:
    return {c[0]: c for c in _parts(entry)[2]}


def best_match(entry: Entry, candidates: Iterable[E]) -> Optional[E]:
    """The candidate (same backward flag) sharing most component hashes; a same-key
    candidate wins outright."""
    key, backward, components = _parts(entry)
    mine = {c[0]: c[1] for c in components}
    best, score = None, -1
    for cand in candidates:
        cand_key, cand_backward, _ = _parts(cand)
        if cand_backward != backward:
            continue
        if cand_key and cand_key == key:
            return cand
        theirs = component_map(cand)
        s = sum(1 for k, h in mine.items() if k in theirs and theirs[k][1] == h)
        if s > score:
            best, score = cand, s
    return best


def differing_components(a: Entry, b: Entry) -> List[Dict[str, Any]]:
    """Components whose hashes differ, by hash (the value text is for humans)."""
    am, bm = component_map(a), component_map(b)
    out = []
    for name in sorted(set(am) | set(bm)):
        ha = am.get(name, [None, None])[1]
        hb = bm.get(name, [None, None])[1]
        if ha != hb:
            out.append({"component": name,
                        "cold": am[name][2] if name in am else None,
                        "warm": bm[name][2] if name in bm else None,
                        "cold_hash": ha, "warm_hash": hb})
    return out


def graph_code_diff(a: Optional[str], b: Optional[str], limit: int = 40,
                    labels: Tuple[str, str] = ("cold", "warm")) -> List[str]:
    """Unified diff of two `gm` component values (newlines are escaped in them)."""
    if not a or not b:
        return []
    def split(code: str) -> List[str]:  # escaped or real newlines, depending on torch
        return [x for x in code.replace("\\n", "\n").splitlines() if x.strip()]

    lines = list(difflib.unified_diff(split(a), split(b), *labels, lineterm="", n=1))
    return lines[:limit] + (["…"] if len(lines) > limit else [])


def component_value(entry: Entry, name: str) -> Optional[str]:
    c = component_map(entry).get(name)
    return None if c is None else str(c[2])
