"""Cache-key manifests: per check, per compiled graph, the key and its components as
the cold run computed them; and the comparison of two manifests (drift).

A manifest is JSON (schema below), one per commit and environment. Pure: no pytest,
no torch, no git.

    {"schema": "pytest-compilecache/manifest", "schema_version": 2,
     "commit": {"sha": "…", "short": "…", "dirty": false, "subject": "…"},
     "environment": {"torch": …, "triton": …, "cuda": …, "python": …, "device": …,
                     "device_name": …},
     "checks": {"<node id>": {"verdict": "pass", "graphs": {"<layer>:<compile id>[:bwd]": {
         "layer": …, "compile_id": …, "backward": …, "key": …, "state": …,
         "components_digest": "<sha256 hex>", "components_count": 640}}}}}

A stored row keeps its components' digest (layers/keys.components_digest); the store
keeps the components themselves once per digest (history/blobs.py), and a comparison
loads them only for a graph whose key or digest changed. A row in memory (check_entry),
a report's row that needed explaining, and a version 1 manifest's row (an earlier
release's store) hold them inline, as `"components": [[name, hash, value], …]`.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import re
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

from pytest_compilecache import layers
from pytest_compilecache.layers import keys
from pytest_compilecache.terms import ENV_FIELDS, environment

SCHEMA = "pytest-compilecache/manifest"
# 2: rows keep their components' digest, the store the components (history/blobs.py);
# version 1 manifests, with every component inline, are still read
SCHEMA_VERSION = 2


def environment_of(rec: Dict[str, Any]) -> Dict[str, Any]:
    """The environment of a phase record or a report's check entry."""
    return environment(rec.get("versions") or {}, rec.get("device"), rec.get("device_name"))


def environment_id(env: Dict[str, Any]) -> str:
    """A readable, filesystem-safe name for an environment, unique by a short hash."""
    digest = hashlib.sha1(json.dumps({k: env.get(k) for k in ENV_FIELDS},
                                     sort_keys=True).encode()).hexdigest()[:8]
    where = env.get("device_name") or env.get("device") or "unknown"
    label = f"torch{env.get('torch')}-{where}-py{env.get('python')}"
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", label) + "-" + digest


def graph_id(row: Dict[str, Any]) -> str:
    return f"{row['layer']}:{row['compile_id']}" + (":bwd" if row.get("backward") else "")


def check_entry(cache: Dict[str, Any], verdict: str) -> Dict[str, Any]:
    """The manifest entry of one check from a cold child's `cache` record."""
    graphs: Dict[str, Dict[str, Any]] = {}
    for cid, by_layer in sorted((cache.get("graphs") or {}).items()):
        for layer in layers.KEYED:
            for e in by_layer.get(layer, []):
                row = {"layer": layer, "compile_id": cid, "backward": e.get("backward", False),
                       "key": e.get("key"), "state": e.get("state"),
                       "bypass_reason": keys.normalize_reason(e.get("bypass_reason")) or None,
                       **components_fields(e)}
                gid, base, n = graph_id(row), graph_id(row), 2
                while gid in graphs:  # the same graph compiled twice in one run
                    gid, n = f"{base}#{n}", n + 1
                graphs[gid] = row
    return {"verdict": verdict, "graphs": graphs}


def components_fields(e: Dict[str, Any]) -> Dict[str, Any]:
    """A row's components inline with their digest and count; of a report's row that
    kept only the digest, the digest and count."""
    if e.get("components") is None and e.get("components_digest") is not None:
        return {"components_digest": e["components_digest"],
                "components_count": e.get("components_count")}
    comps = e.get("components") or []
    return {"components": comps, "components_digest": keys.components_digest(comps),
            "components_count": len(comps) if isinstance(comps, list) else None}


def new_manifest(commit: Dict[str, Any], env: Dict[str, Any]) -> Dict[str, Any]:
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "commit": commit,
            "environment": env,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "checks": {}}


def is_manifest(data: Any) -> bool:
    return isinstance(data, dict) and data.get("schema") == SCHEMA


def problem(data: Any) -> Optional[str]:
    """Why `data` is not a manifest this version can read, or None. Every level that
    comparison and rendering later read is checked here, once: a file of the right schema
    but the wrong shape (a hand edit, a bad merge) must be refused with the JSON path of
    what is wrong, not fail deep inside a drift comparison."""
    if not is_manifest(data):
        return "not a pytest-compilecache key manifest"
    version = data.get("schema_version")
    if newer_schema(data):
        return (f"written by a newer pytest-compilecache (manifest schema_version {version!r}, "
                f"this one reads {SCHEMA_VERSION}): upgrade pytest-compilecache")
    for name in ("commit", "environment"):
        if not isinstance(data.get(name), dict):
            return f"{name}: {_not('an object', data.get(name))}"
    for name in ("sha", "short", "subject"):
        value = data["commit"].get(name)
        if value is not None and not isinstance(value, str):
            return f"commit.{name}: {_not('a string', value)}"
    checks = data.get("checks")
    if not isinstance(checks, dict):
        return f"checks: {_not('an object of node ids to entries', checks)}"
    for nodeid, entry in checks.items():
        where = f"checks[{_key(nodeid)}]"
        if not isinstance(entry, dict):
            return f"{where}: {_not('an object', entry)}"
        graphs = entry.get("graphs")
        if graphs is None:
            continue
        if not isinstance(graphs, dict):
            return f"{where}.graphs: {_not('an object of graph ids to keys', graphs)}"
        for gid, g in graphs.items():
            why = _graph_problem(g)
            if why:
                return f"{where}.graphs[{_key(gid)}]{why}"
    return None


def newer_schema(data: Any) -> bool:
    """A manifest a newer version wrote: its repair is an upgrade, not a deletion."""
    version = data.get("schema_version") if isinstance(data, dict) else None
    return not isinstance(version, int) or version > SCHEMA_VERSION


def _graph_problem(g: Any) -> Optional[str]:
    """What is wrong in one graph's record (a suffix to its JSON path), or None."""
    if not isinstance(g, dict):
        return f": {_not('an object', g)}"
    for name in ("layer", "key", "state", "bypass_reason"):
        if g.get(name) is not None and not isinstance(g[name], str):
            return f".{name}: {_not('a string', g[name])}"
    digest, count = g.get("components_digest"), g.get("components_count")
    if digest is not None and not (isinstance(digest, str) and _DIGEST.fullmatch(digest)):
        return f".components_digest: {_not('a sha256 hex digest', digest)}"
    if count is not None and not (isinstance(count, int) and count >= 0):
        return f".components_count: {_not('a count', count)}"
    comps = g.get("components")
    if comps is None:
        return None
    if not isinstance(comps, list):
        return f".components: {_not('a list', comps)}"
    for i, c in enumerate(comps):
        if not (isinstance(c, list) and len(c) == 3 and isinstance(c[0], str)
                and all(x is None or isinstance(x, str) for x in c[1:])):
            return f".components[{i}]: {_not('[name, hash, value] strings', c)}"
    return None


_DIGEST = re.compile(r"[0-9a-f]{64}")


def _key(name: str) -> str:
    """A JSON object key as it appears in a path: quoted, escaped (one printable line)."""
    return json.dumps(name)


def _not(wanted: str, value: Any) -> str:
    got = json.dumps(value)
    return f"not {wanted} but {got if len(got) <= 60 else got[:57] + '...'}"


class BadManifest(ValueError):
    """A stored manifest that is there but unusable: names the file, what is wrong with
    it and the repair, in one line (a check's problem, or the CLI's error)."""

    def __init__(self, path: Any, why: str, newer: bool = False) -> None:
        self.path, self.why, self.newer = str(path), why, newer
        super().__init__(f"the key manifest {path} is unusable: {why}"
                         + ("" if newer else f"; {repair_hint(path)}"))

    def __reduce__(self) -> Any:  # picklable, as exceptions crossing processes must be
        return (type(self), (self.path, self.why, self.newer))


class NoStore(ValueError):
    """A file whose rows keep only their components' digest, with no store to load them
    from: names the file and the option that gives one."""


def repair_hint(path: Any) -> str:
    return (f"delete {path} and re-record it: run the checks at that commit with "
            f"--compile-cache-check (or run --compile-cache-baseline=<that commit>, or "
            f"`pytest-compilecache bisect`, which record a missing manifest in a worktree)")


# -- comparison ------------------------------------------------------------------------
def allowed(component: str, patterns: Sequence[str]) -> bool:
    """Shell-style `*` and `?`; brackets are literal, as in `inductor_config[*]`."""
    for p in patterns:
        rx = re.escape(p).replace(r"\*", ".*").replace(r"\?", ".")
        if re.fullmatch(rx, component):
            return True
    return False


# what a row's components are: held inline, or loaded from a store by its digest (None:
# only the digest is known, as in a report's row of a graph that needed no explaining)
Loader = Callable[[Dict[str, Any]], Optional[List[Any]]]


def inline(row: Dict[str, Any]) -> Optional[List[Any]]:
    """The components a row holds; None where it keeps only their digest."""
    if row.get("components") is None and row.get("components_digest") is not None:
        return None
    return row.get("components") or []


def digest_of(row: Dict[str, Any]) -> str:
    return row.get("components_digest") or keys.components_digest(row.get("components") or [])


def compare_check(base: Optional[Dict[str, Any]], head: Optional[Dict[str, Any]],
                  allow: Sequence[str] = (), load_old: Loader = inline,
                  load_new: Loader = inline) -> Dict[str, Any]:
    """unchanged / drifted / new / gone / no keys (none recorded at either: a bypass, or
    nothing compiled) for one check, with per-graph component diffs. Components are
    loaded (`load_old`, `load_new`: the store of each side) only for a graph whose key
    or digest changed.

    A drift whose every changed component matches `allow` is `accepted`."""
    if base is None and head is None:
        return {"status": "unknown", "graphs": []}
    if base is None:
        return {"status": "new", "graphs": []}
    if head is None:
        return {"status": "gone", "graphs": []}
    bg, hg = base.get("graphs") or {}, head.get("graphs") or {}
    if not bg and not hg:  # bypassed or nothing compiled at both: nothing was compared
        return {"status": "no keys", "graphs": []}
    graphs = []
    for gid in sorted(set(bg) | set(hg), key=_graph_order):
        b, h = bg.get(gid), hg.get(gid)
        old = new = None
        if b is not None and h is not None and b.get("key") == h.get("key"):
            if digest_of(b) == digest_of(h):
                continue
            old, new = load_old(b), load_new(h)
            # the digest also covers the values torch prints (object reprs may differ
            # where hashes do not): with a side kept only as its digest, the equal key
            # is the answer
            if old is None or new is None or _hashes(old) == _hashes(new):
                continue
        g: Dict[str, Any] = {"graph": gid, "layer": (h or b or {}).get("layer"),
                             "old_key": (b or {}).get("key"), "new_key": (h or {}).get("key")}
        if b is None or h is None:
            g["change"] = "graph added" if b is None else "graph removed"
            g["components"] = []
        else:
            g["change"] = "key changed"
            _components_diff(g, load_old(b) if old is None else old,
                             load_new(h) if new is None else new, b, h)
        g["accepted"] = bool(allow) and bool(g["components"]) and all(
            allowed(c["component"], allow) for c in g["components"])
        graphs.append(g)
    if not graphs:
        status = "unchanged"
    elif all(g["accepted"] for g in graphs):
        status = "accepted"
    else:
        status = "drifted"
    return {"status": status, "graphs": graphs}


def _components_diff(g: Dict[str, Any], old: Optional[List[Any]], new: Optional[List[Any]],
                     b: Dict[str, Any], h: Dict[str, Any]) -> None:
    """The components that differ, both values, and the graph code diff; or, where a side
    kept only its digest, which side (a report of a graph that needed no explaining)."""
    if old is None or new is None:
        g["components"] = []
        g["unknown"] = ", ".join(f"{side} {digest_of(row)[:12]}" for side, row, comps in
                                 (("old", b, old), ("new", h, new)) if comps is None)
        return
    g["components"] = [{"component": d["component"], "old": d["cold"], "new": d["warm"],
                        "old_hash": d["cold_hash"], "new_hash": d["warm_hash"]}
                       for d in keys.differing_components({"components": old},
                                                          {"components": new})]
    gm = next((d for d in g["components"] if d["component"] == "gm"), None)
    if gm:
        g["graph_code_diff"] = keys.graph_code_diff(gm["old"], gm["new"], labels=("old", "new"))


def _hashes(components: List[Any]) -> Dict[str, Any]:
    return {c[0]: c[1] for c in components}


def _graph_order(gid: str) -> Any:
    layer, _, rest = gid.partition(":")
    return (rest, layer)


def compare(base: Dict[str, Any], head: Dict[str, Any], nodeids: Optional[Iterable[str]] = None,
            allow: Sequence[str] = (), load_old: Loader = inline, load_new: Loader = inline
            ) -> Dict[str, Dict[str, Any]]:
    """Per node id (default: every id in either manifest) the comparison of two manifests."""
    bc, hc = base.get("checks") or {}, head.get("checks") or {}
    ids = sorted(set(nodeids) if nodeids is not None else set(bc) | set(hc))
    return {n: compare_check(bc.get(n), hc.get(n), allow, load_old, load_new) for n in ids}


def differs(base: Dict[str, Any], head: Dict[str, Any], nodeids: Iterable[str],
            load_old: Loader = inline, load_new: Loader = inline) -> bool:
    return any(c["status"] in ("drifted", "accepted", "gone")
               for c in compare(base, head, nodeids, (), load_old, load_new).values())


def changed_components(cmp: Dict[str, Any], include_accepted: bool = True) -> List[str]:
    """Names of the key components a comparison found changed; a graph added, removed
    or re-keyed without components counts by its change."""
    graphs = [g for g in cmp.get("graphs", []) if include_accepted or not g.get("accepted")]
    return sorted({c["component"] for g in graphs for c in g.get("components", [])}
                  or {g["change"] for g in graphs})


# -- rendering ---------------------------------------------------------------------------
def commit_label(manifest: Dict[str, Any]) -> str:
    c = manifest.get("commit") or {}
    label = c.get("short") or (c.get("sha") or "unknown")[:10]
    if c.get("dirty"):
        said = dirty_causes(c, 3)
        label += f" (dirty: {said})" if said else " (dirty)"
    if c.get("subject"):
        label += f" \"{c['subject']}\""
    return label


DIRTY_KINDS = (("modified", "modified"), ("untracked", "untracked"),
               ("ignored", "ignored by git but read"))


def dirty_causes(commit: Dict[str, Any], per_kind: int = 5) -> str:
    """What made a work tree dirty, from its commit record: "modified a.py; untracked
    conftest.py, ..." (empty where the record names nothing)."""
    said = []
    for key, words in DIRTY_KINDS:
        names = [str(n) for n in commit.get(key) or []]
        if names:
            said.append(f"{words} {', '.join(names[:per_kind])}"
                        + (", ..." if len(names) > per_kind else ""))
    return "; ".join(said)


def drift_lines(nodeid: str, cmp: Dict[str, Any], base_label: str = "base",
                head_label: str = "head") -> List[str]:
    lines = [f"{cmp['status']:<9} {nodeid}"]
    for g in cmp["graphs"]:
        tag = " (accepted)" if g.get("accepted") else ""
        lines.append(f"  {g['graph']}: {g['change']}{tag}  {g.get('old_key') or '-'} -> "
                     f"{g.get('new_key') or '-'}")
        if g.get("unknown"):
            lines.append(f"    components not at hand (only their digest: {g['unknown']}); "
                         f"diff the key manifests, or pass --store with the store that holds them")
        for c in g.get("components", []):
            if c["component"] == "gm":
                lines.append("    gm (graph code) changed")
                continue
            lines.append(f"    {c['component']}: {_short(c['old'])} -> {_short(c['new'])}")
        for d in g.get("graph_code_diff", []):
            lines.append("      " + d)
    return lines


def _short(v: Any, limit: int = 100) -> str:
    s = "-" if v is None else "".join(ch if ch.isprintable() else "?" for ch in str(v))
    return s if len(s) <= limit else s[:limit] + "…"


def manifest_lines(manifest: Dict[str, Any]) -> List[str]:
    env = manifest.get("environment") or {}
    lines = [f"manifest of {commit_label(manifest)} in {environment_id(env)}"]
    for nodeid, entry in sorted((manifest.get("checks") or {}).items()):
        lines.append(f"  {nodeid} ({entry.get('verdict')})")
        for gid, g in sorted((entry.get("graphs") or {}).items(), key=lambda kv: _graph_order(kv[0])):
            lines.append(f"    {gid:<26} {g.get('state') or '-':<7} {g.get('key') or '-'} "
                         f"({_count(g)} components)")
    return lines


def _count(row: Dict[str, Any]) -> Any:
    count = row.get("components_count")
    return len(row.get("components") or []) if count is None else count
