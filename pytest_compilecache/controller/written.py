"""The ledger of a shared cache root (--compile-cache-share-variants): which entries the
variants' turns saved there, and which ones a turn compiled but could not save.

The judge (judge/false_hits.py) reads a loaded entry's writer from here, and a false
hit is only seen through it: an entry listed that was never saved, or a ledger read as
empty, passes a false hit unseen. So an entry is listed only where its files are in the
root after the turn; an entry the variant's own cold run saved and its turn did not (a
quota, a full disk, a read-only dir) is listed apart, as `unsaved`; and a ledger that
is not what this module wrote (over its cap, not JSON, an entry of the wrong types)
raises Damaged, naming the file and the fix, never reads as fewer entries. Only the
plugin writes it, under the root's flock (controller/variants.py).

The controller's side only: no torch, no pytest.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, Mapping, Optional, Set, Tuple

from pytest_compilecache import jsonfile
from pytest_compilecache.files import write_json_atomic

LEDGER = "written.json"
LEDGER_MAX_BYTES = 64 << 20  # ~640 components a graph; thousands of graphs fit
LAYERS = ("aot_autograd", "fx_graph")
FIX = ("leave the shared root alone while the session runs (a temp-dir cleaner, a script, "
       "another shell) and run the session again")
Entries = Dict[str, Dict[str, Any]]


class Damaged(Exception):
    """What keeps the turns from saying who wrote what: the message names the file and
    the fix."""


def _damaged(path: Path, why: str, fix: str = FIX) -> Damaged:
    return Damaged(f"the ledger of the cache the variants share, {path}, {why}: which "
                   f"variant wrote an entry can no longer be told, so a false hit would pass "
                   f"unseen; {fix}")


@dataclass
class Ledger:
    """`entries`: key -> {layer, graph, backward, components, writer}, each saved in the
    root; `unsaved`: the same for entries a turn compiled and could not save there."""
    entries: Entries = field(default_factory=dict)
    unsaved: Entries = field(default_factory=dict)


def load(path: Path) -> Ledger:
    """The ledger at `path` (none yet: empty), validated; Damaged where it is not one."""
    try:
        if path.is_symlink():
            raise _damaged(path, "is a symlink")
        data = jsonfile.load(path, limit=LEDGER_MAX_BYTES)
    except FileNotFoundError:
        return Ledger()
    except jsonfile.Unreadable as e:
        raise _damaged(path, f"cannot be read ({e.why})") from None
    if not isinstance(data, dict) or set(data) != {"entries", "unsaved"}:
        raise _damaged(path, "is not a ledger this plugin wrote (an object of `entries` and "
                            "`unsaved`)")
    ledger = Ledger(data["entries"], data["unsaved"])
    for section, entries in (("entries", ledger.entries), ("unsaved", ledger.unsaved)):
        wrong = _wrong(entries)
        if wrong:
            raise _damaged(path, f"holds {section} of the wrong types ({wrong})")
    return ledger


def save(path: Path, ledger: Ledger) -> None:
    """Written whole, atomically; Damaged (and the old one kept) where it would exceed
    the cap its readers keep to."""
    data = {"entries": ledger.entries, "unsaved": ledger.unsaved}
    size = len(json.dumps(data, indent=1, default=str).encode())  # as written below
    if size > LEDGER_MAX_BYTES:
        raise _damaged(path, f"would grow to {size >> 20} MiB, over its "
                            f"{LEDGER_MAX_BYTES >> 20} MiB cap",
                      "check fewer of this test function's variants in one session (-k)")
    write_json_atomic(path, data)


def _wrong(entries: Any) -> Optional[str]:
    """The first entry that is not what `entry` makes, as `key: what is wrong`."""
    if not isinstance(entries, dict):
        return f"a {type(entries).__name__}, not an object"
    for key, e in entries.items():
        why = _entry_problem(e)
        if why:
            return f"{key[:24]!r}: {why}"
    return None


def _entry_problem(e: Any) -> Optional[str]:
    if not isinstance(e, dict):
        return f"a {type(e).__name__}, not an object"
    w = e.get("writer")
    if e.get("layer") not in LAYERS or not isinstance(e.get("graph"), str):
        return "its layer or graph is not one"
    if not isinstance(e.get("backward"), bool) or not isinstance(e.get("components"), list):
        return "its backward or components are of the wrong type"
    if (not isinstance(w, dict) or not isinstance(w.get("nodeid"), str)
            or not isinstance(w.get("id"), str) or not isinstance(w.get("params"), dict)):
        return "its writer is not a variant (nodeid, id, params)"
    if not all(isinstance(c, list) and len(c) == 3 and isinstance(c[0], str)
               for c in e["components"]):
        return "a component is not [name, hash, value]"
    return None


def entry(layer: str, gid: str, event: Mapping[str, Any], writer: Dict[str, Any]
          ) -> Dict[str, Any]:
    return {"layer": layer, "graph": str(gid), "backward": bool(event.get("backward")),
            "components": [list(c) for c in event.get("components") or []
                           if isinstance(c, (list, tuple)) and len(c) == 3],
            "writer": writer}


def missed(rec: Mapping[str, Any]) -> Iterator[Tuple[str, str, Mapping[str, Any]]]:
    """(layer, graph, event) of each entry the turn compiled (its misses with a key)."""
    graphs = ((rec.get("cache") or {}).get("graphs") or {})
    for gid, events in graphs.items():
        for layer in LAYERS:
            for e in (events or {}).get(layer) or []:
                if isinstance(e, dict) and e.get("state") == "miss" and e.get("key"):
                    yield layer, gid, e


def entry_dir(inductor: Path, layer: str, key: str) -> Path:
    """Where torch keeps an entry in a cache dir: inductor/aotautograd/<key>/…,
    inductor/fxgraph/<key[1:3]>/<key>/… (files.saved_keys reads the same layout)."""
    if layer == "aot_autograd":
        return inductor / "aotautograd" / key
    return inductor / "fxgraph" / key[1:3] / key


def on_disk(inductor: Path, layer: str, key: str) -> bool:
    """torch's file of the entry is in the cache dir."""
    try:
        return any(True for _ in entry_dir(inductor, layer, key).iterdir())
    except OSError:
        return False


def after_turn(ledger: Ledger, writer: Dict[str, Any], rec: Mapping[str, Any],
               inductor: Path, own_saved: Set[str]) -> Entries:
    """Enter the turn's entries in `ledger`: those saved in the root (a key already
    listed keeps its first writer); those its own cold run saved but the root lacks,
    as unsaved (an entry torch never saves, its own cold run did not save either).
    Returns the latter: this turn's."""
    unsaved: Entries = {}
    for layer, gid, e in missed(rec):
        key = str(e["key"])
        if key in ledger.entries:
            continue
        if on_disk(inductor, layer, key):
            ledger.entries[key] = entry(layer, gid, e, writer)
            ledger.unsaved.pop(key, None)  # a later turn saved it: loadable now
        elif key in own_saved:
            unsaved[key] = entry(layer, gid, e, writer)
            ledger.unsaved.setdefault(key, unsaved[key])
    return unsaved
