"""Intended key changes, accepted in the repository: `compilecache-accepted.json` at its
root, written by `pytest-compilecache accept REF` and reviewed in the PR's diff.

Why it exists: every PR that changes the model changed its keys, so the keys-only drift
and the deploy over main's caches went red with nothing to make them green, and the
`--compile-cache-allow-drift=gm` a maintainer pasted into CI accepted every later model
change too. An entry accepts exactly one change of one check: per graph, the components
that changed and their values before and after, as the hashes torch keys them by (a
later change changes other values, which the entry does not accept). Not the whole
keys: they also hold what the machine reads from its environment (torch reads `CI` into
functorch's error_on_custom_op_aliasing, in every AOTAutograd key), so an acceptance
recorded on a laptop would match no key of GitHub's run; a component the PR changed
changed the same on both. The keys are kept for the reviewer, and matched where a
graph's components are unknown (added, removed, or kept as a digest). An entry that no
longer matches its check's drift, or whose check is gone, is stale: said, and pruned by
the same command.
Pure: no pytest, no torch.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

FILE = "compilecache-accepted.json"
SCHEMA = "pytest-compilecache-accepted-drift"
DOWNSTREAM = ("kernels", "autotune")  # built from an FX graph: a new graph, new files


class AcceptedFileError(Exception):
    """The file cannot be read: named, with its repair."""


def command(ref: str) -> str:
    """The one command that accepts the drift against `ref` in the repository."""
    return f"pytest-compilecache accept {ref}"


def load(path: Path) -> Dict[str, Dict[str, Any]]:
    """Node id -> entry; {} where there is no file."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise AcceptedFileError(f"{path} cannot be read ({e}); fix it, or delete it and "
                                f"accept again with `{command('REF')}`") from None
    checks = data.get("checks") if isinstance(data, dict) else None
    if data.get("schema") != SCHEMA or not isinstance(checks, dict) or not all(
            isinstance(e, dict) and isinstance(e.get("graphs"), dict) for e in checks.values()):
        raise AcceptedFileError(f"{path} is not an accepted-drift file of "
                                f"pytest-compilecache; delete it and accept again with "
                                f"`{command('REF')}`")
    return checks


def write(path: Path, entries: Mapping[str, Dict[str, Any]]) -> None:
    """Sorted, indented, one key per line: a diff a reviewer reads."""
    text = json.dumps({"schema": SCHEMA, "version": 1, "checks": dict(sorted(entries.items()))},
                      indent=2, sort_keys=True)
    path.write_text(text + "\n")


def entry_of(cmp: Dict[str, Any], base_label: str) -> Dict[str, Any]:
    """The entry accepting a check's comparison (manifest.compare_check) exactly."""
    graphs = {g["graph"]: _accepted_graph(g) for g in cmp.get("graphs", [])}
    components = sorted({c["component"] for g in cmp.get("graphs", [])
                         for c in g.get("components", [])})
    return {"base": base_label, "components": components, "graphs": graphs}


def matches(entry: Optional[Dict[str, Any]], cmp: Dict[str, Any]) -> bool:
    """Every changed graph of the comparison is one the entry accepts, key for key."""
    graphs = cmp.get("graphs") or []
    if not entry or not graphs:
        return False
    have = entry.get("graphs") or {}
    return all(_same_change(have.get(g["graph"]), g.get("old_key"), g.get("new_key"),
                            _changes(g.get("components"), "old", "new"))
               for g in graphs)


def _accepted_graph(g: Dict[str, Any]) -> Dict[str, Any]:
    """One graph's accepted change: its keys, and the components that changed with
    their values (what is matched, where there are any)."""
    out: Dict[str, Any] = {"old": g.get("old_key"), "new": g.get("new_key")}
    changes = _changes(g.get("components"), "old", "new")
    if changes:
        out["changes"] = changes
    return out


def _changes(diffs: Optional[Sequence[Dict[str, Any]]], old: str, new: str
             ) -> Dict[str, List[Optional[str]]]:
    """Component -> [hash before, hash after] of a components diff (a comparison's
    old/new, a warm lookup's cold/warm drift): the hash torch computes from the value,
    not the value's text, which the key's debug lines cut (at 200 characters) and which
    may print what the hash leaves out (a graph's code comments name its files)."""
    return {d["component"]: [d.get(f"{old}_hash"), d.get(f"{new}_hash")]
            for d in diffs or () if d.get(f"{old}_hash") or d.get(f"{new}_hash")}


def _same_change(have: Any, old_key: Any, new_key: Any,
                 changes: Dict[str, List[Optional[str]]]) -> bool:
    """The accepted graph `have` is this change: the same components changed between
    the same values; by the keys where either side knows no components (an entry
    written before components were kept, a graph added or removed)."""
    if not isinstance(have, dict):
        return False
    if changes and have.get("changes"):
        return bool(have["changes"] == changes)
    return bool(have.get("old") == old_key and have.get("new") == new_key)


def accept(cmp: Dict[str, Any], entry: Optional[Dict[str, Any]]) -> bool:
    """Mark a drifted comparison accepted where the entry matches it; True if it did."""
    if cmp.get("status") != "drifted" or not matches(entry, cmp):
        return False
    for g in cmp["graphs"]:
        g["accepted"] = True
    cmp["status"], cmp["accepted_by"] = "accepted", FILE
    return True


def stale_reason(entry: Dict[str, Any], cmp: Optional[Dict[str, Any]]) -> Optional[str]:
    """Why an entry no longer accepts anything this comparison shows, or None."""
    if cmp is None or cmp.get("status") == "gone":
        return "its check no longer exists"
    if matches(entry, cmp):
        return None
    if not cmp.get("graphs"):
        return f"its check's keys no longer drift ({cmp.get('status')})"
    now = sorted({c["component"] for g in cmp["graphs"] for c in g.get("components", [])}
                 or {g["change"] for g in cmp["graphs"]})
    said = entry.get("components") or ["?"]
    if set(now) == set(said):  # the same parts changed, into other keys: name the keys
        return ("its check's keys changed again in the same components (" + ", ".join(now[:6])
                + "): " + _other_keys(entry, cmp))
    return ("its check's drift is another now (" + ", ".join(now[:6]) + "; accepted: "
            + ", ".join(said[:6]) + ")")


def _other_keys(entry: Dict[str, Any], cmp: Dict[str, Any]) -> str:
    """The first changed graph whose keys the entry does not hold, both pairs shown."""
    have = entry.get("graphs") or {}
    for g in cmp.get("graphs") or []:
        now = {"old": g.get("old_key"), "new": g.get("new_key")}
        if not _same_change(have.get(g["graph"]), now["old"], now["new"],
                            _changes(g.get("components"), "old", "new")):
            was = have.get(g["graph"])
            return (f"{g['graph']} {_pair(now)}, accepted "
                    + (_pair(was) if isinstance(was, dict) else "nothing for it"))
    return "?"


def _pair(keys: Dict[str, Any]) -> str:
    return f"{str(keys.get('old'))[:10]}… -> {str(keys.get('new'))[:10]}…"


def stale_lines(entries: Mapping[str, Dict[str, Any]], cmps: Mapping[str, Dict[str, Any]],
                ref: str) -> List[str]:
    """One line per stale entry of the checks this session compared (a check not run
    here is not judged: `accept` prunes the entries of checks gone from the head),
    naming it and the command that prunes it."""
    out = []
    for nodeid, entry in sorted(entries.items()):
        why = stale_reason(entry, cmps[nodeid]) if nodeid in cmps else None
        if why:
            out.append(f"{FILE}: stale entry {nodeid}: {why}; prune it: "
                       f"`{command(ref)} --prune`")
    return out


def update(entries: Mapping[str, Dict[str, Any]], cmps: Mapping[str, Dict[str, Any]],
           base_label: str, prune_only: bool = False) -> Dict[str, Dict[str, Any]]:
    """The file's entries after `accept`: each drifted check's change accepted (not with
    `prune_only`), and every entry its comparison makes stale dropped."""
    out = dict(entries)
    for nodeid, cmp in cmps.items():
        if cmp.get("status") == "drifted" and not prune_only:
            out[nodeid] = entry_of(cmp, base_label)
        elif nodeid in out and stale_reason(out[nodeid], cmp):
            del out[nodeid]
    return out


# -- the deploy: misses the accepted drift explains ----------------------------------------
def explained_layers(entry: Optional[Dict[str, Any]], rows: Sequence[Dict[str, Any]],
                     missed: Sequence[str], keyed: Sequence[str]) -> List[str]:
    """The missed layers an entry explains: a keyed layer whose every warm lookup that
    missed differs from its cold twin (same graph) in the components the entry accepts,
    between the same values (by the keys where components are unknown); the layers
    built from an FX graph where all FX-graph misses are explained."""
    if not entry:
        return []
    have = entry.get("graphs") or {}
    cold = {_gid(r): r.get("key") for r in rows if r.get("phase") == "cold"}
    out = []
    for layer in (x for x in missed if x in keyed):
        warm = [r for r in rows if r.get("phase") == "warm" and r.get("layer") == layer
                and r.get("state") != "hit"]
        if warm and all(_same_change(have.get(_gid(r)), cold.get(_gid(r)), r.get("key"),
                                     _changes(r.get("drift"), "cold", "warm"))
                        for r in warm):
            out.append(layer)
    if "fx_graph" in out:
        out += [x for x in missed if x in DOWNSTREAM]
    return out


def _gid(row: Dict[str, Any]) -> str:
    return f"{row.get('layer')}:{row.get('compile_id')}" + (":bwd" if row.get("backward") else "")
