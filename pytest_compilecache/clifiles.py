"""The files `show`, `diff` and `merge` read: each loaded and checked (a broken one is
one line naming it and its repair, exit 2), a revision read as its commit's manifest in
the store (history/refs.py), a report's cold keys put in manifest form so that any two
can be diffed. JSON only: no torch, no pytest."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Dict, List, Sequence

from pytest_compilecache import jsonfile
from pytest_compilecache.history import manifest as mf
from pytest_compilecache.render import report


class CliError(Exception):
    """One line for stderr; the command exits with EXIT_USAGE."""


def load(path: str) -> Dict[str, Any]:
    """A report or manifest, checked; anything wrong with the file (missing, truncated,
    too large, too deep) is a CliError naming it and its repair: exit 2, never a
    traceback, and for `diff` never "keys differ"."""
    try:
        data = jsonfile.load(path)
    except (OSError, jsonfile.Unreadable) as e:
        stored = Path(path).parent.parent.name == "manifests"  # a file of a store
        said = e.why if isinstance(e, jsonfile.Unreadable) else str(e)
        raise CliError(f"cannot read {path}: {said}; " + (mf.repair_hint(path) if stored else
                                     "pass a report or key manifest that pytest-compilecache "
                                     "wrote (write it again: rerun the session, or download "
                                     "the artifact again)")) from None
    if mf.is_manifest(data):
        why = mf.problem(data)
        if why:
            raise CliError(str(mf.BadManifest(path, why, newer=mf.newer_schema(data))))
        return data
    if isinstance(data, dict) and data.get("schema") == report.SCHEMA:
        why = report.problem(data)
    else:
        why = "neither a pytest-compilecache report nor a key manifest"
    if why:
        raise CliError(f"{path}: {why}")
    return data


def as_manifest(data: Dict[str, Any], path: str = "the report") -> Dict[str, Any]:
    """A report's cold keys in manifest form, so any two files can be diffed. The rows
    a report's checks hold are checked as a manifest's would be: a malformed one is an
    error naming the file (exit 2), never a traceback or a drift."""
    if mf.is_manifest(data):
        return data
    out = mf.new_manifest(data.get("commit") or {}, {})
    for i, c in enumerate(data.get("checks", [])):
        if c.get("via", "local") != "local":  # keys are the local path's cold run's
            continue
        rows = c.get("graphs") or []
        if not isinstance(rows, list):
            raise CliError(f"{path}: checks[{i}].graphs: not a list of graph records")
        cache: Dict[str, Any] = {"graphs": {}}
        for j, row in enumerate(rows):
            if not isinstance(row, dict):
                raise CliError(f"{path}: checks[{i}].graphs[{j}]: not a graph record")
            if row.get("phase") != "cold":
                continue
            if not isinstance(row.get("compile_id"), str) or not isinstance(row.get("layer"), str):
                raise CliError(f"{path}: checks[{i}].graphs[{j}]: a cold graph record "
                               f"without a compile id and a cache layer")
            cache["graphs"].setdefault(row["compile_id"], {}).setdefault(
                row["layer"], []).append(row)
        out["checks"][c["nodeid"]] = mf.check_entry(cache, c.get("verdict", "?"))
        out["environment"] = out["environment"] or mf.environment_of(c)
    why = mf.problem(out)
    if why:
        raise CliError(f"{path}: its cold keys are malformed: {why}")
    return out


def files(args: argparse.Namespace, given: Sequence[str]) -> List[str]:
    """The files to read: files as given, revisions as their manifests in the store."""
    from pytest_compilecache.history.refs import RefError, manifest_files

    try:
        return manifest_files(given, args.store, args.environment, Path.cwd())
    except RefError as e:
        raise CliError(str(e)) from None


def only(data: Dict[str, Any], checks: Sequence[str], path: str) -> Dict[str, Any]:
    """`data` with the named checks alone (all where none are named)."""
    if not checks:
        return data
    if mf.is_manifest(data):
        have = set(data["checks"])
        kept: Any = {n: e for n, e in data["checks"].items() if n in checks}
    else:
        have = {c.get("nodeid") for c in data.get("checks", [])}
        kept = [c for c in data.get("checks", []) if c.get("nodeid") in checks]
    missing = [c for c in checks if c not in have]
    if missing:
        raise CliError(f"{path} holds no check {', '.join(missing)}")
    return {**data, "checks": kept}
