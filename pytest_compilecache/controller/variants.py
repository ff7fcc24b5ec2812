"""The cache a service's model variants share (--compile-cache-share-variants).

A service serves all its variants (the parametrized instances of one test function)
from one cache dir. After its own cold and warm phases, each variant runs once more
over one cache root shared by its function's variants, taking turns (an flock on the
root, so xdist workers queue as one service's restarts would), in the order they
reach it: the order the session runs them in one process. After each turn the root's ledger records
the entries that turn wrote, with the variant that wrote them, its parameters and the
entry's key components: what the judge (judge/false_hits.py) reads to tell an entry
loaded from another variant from the loader's own.

The controller's side only: no torch, no pytest.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from pytest_compilecache import jsonfile
from pytest_compilecache.files import write_json_atomic
from pytest_compilecache.isolation import ROOT_PARTS, CacheRoot
from pytest_compilecache.layers.keys import EXTENSION

SHARED_DIR_ENV = "PYTEST_COMPILECACHE_SHARED_DIR"
LEDGER = "written.json"
LEDGER_MAX_BYTES = 64 << 20  # ~640 components a graph; thousands of graphs fit
LAYERS = ("aot_autograd", "fx_graph")


def group_of(nodeid: str) -> str:
    """The test function a check is a variant of: its node id without the parameters."""
    return nodeid.split("[", 1)[0]


@dataclass(frozen=True)
class Variant:
    """One check as the ledger names it: its node id, its parameter set's id, and each
    parameter's value as text (what tells two variants apart)."""
    nodeid: str
    id: str
    params: Mapping[str, str]

    def to_json(self) -> Dict[str, Any]:
        return {"nodeid": self.nodeid, "id": self.id, "params": dict(self.params)}


class SharedRoot:
    """One function's shared cache root: its turns and its ledger."""

    def __init__(self, root: CacheRoot, lock: Path) -> None:
        self.root, self.lock = root, lock

    @contextlib.contextmanager
    def turn(self) -> Iterator["SharedRoot"]:
        """One variant at a time, as one service restarting over its cache would."""
        fd = os.open(self.lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield self
        finally:
            os.close(fd)  # releases the flock

    def written(self) -> Dict[str, Dict[str, Any]]:
        """key -> {layer, graph, backward, components, writer}: every entry a turn wrote
        (bounded, validated: a damaged ledger is no entries, never a crash)."""
        path = self.root.phases / LEDGER
        try:
            if path.is_symlink():
                return {}
            data = jsonfile.load(path, limit=LEDGER_MAX_BYTES)
        except (OSError, jsonfile.Unreadable):
            return {}
        return {k: v for k, v in data.items() if isinstance(v, dict)} \
            if isinstance(data, dict) else {}

    def record(self, variant: Variant, rec: Mapping[str, Any]) -> None:
        """After a turn: the entries it wrote (its misses; a key already written by an
        earlier turn keeps its first writer)."""
        ledger = self.written()
        graphs = ((rec.get("cache") or {}).get("graphs") or {})
        for gid, events in graphs.items():
            for layer in LAYERS:
                for e in (events or {}).get(layer) or []:
                    key = e.get("key")
                    if e.get("state") == "miss" and key and key not in ledger:
                        ledger[key] = {"layer": layer, "graph": gid,
                                       "backward": bool(e.get("backward")),
                                       "components": e.get("components") or [],
                                       "writer": variant.to_json()}
        write_json_atomic(self.root.phases / LEDGER, ledger)


def seen_by(ledger: Mapping[str, Dict[str, Any]], rec: Mapping[str, Any], me: Variant
            ) -> Dict[str, Any]:
    """What the judge needs of the ledger for one turn: this variant, the entries other
    variants wrote that it loaded (its hits on their keys), and those it did not (for
    saying which components kept it from them)."""
    hit = {e.get("key") for events in ((rec.get("cache") or {}).get("graphs") or {}).values()
           for layer in LAYERS for e in (events or {}).get(layer) or []
           if e.get("state") == "hit"}
    others = {k: v for k, v in ledger.items()
              if (v.get("writer") or {}).get("nodeid") != me.nodeid}
    return {"variant": me.to_json(),
            "loaded": {k: _named(v) for k, v in others.items() if k in hit},
            "not_loaded": dict(list((k, v) for k, v in others.items() if k not in hit)[:16]),
            "writers": sorted({(v.get("writer") or {}).get("nodeid", "?")
                               for v in others.values()})}


def _named(entry: Mapping[str, Any]) -> Dict[str, Any]:
    """A loaded entry as a failure names it: of its ~640 key components, how many, and
    those from the user's extension points (the judge shows the set ones)."""
    comps = entry.get("components") or []
    return {**entry, "component_count": len(comps),
            "components": [c for c in comps if isinstance(c, (list, tuple)) and c
                           and EXTENSION.search(str(c[0]))]}


class SharedCaches:
    """The session's shared roots, one per test function with more than one variant,
    under one directory the controller makes (and hands to xdist workers)."""

    def __init__(self, parent: Path, groups: Mapping[str, int]) -> None:
        self.parent = parent
        self.groups = dict(groups)  # function -> how many of its variants are checked

    def root_for(self, nodeid: str) -> Optional[SharedRoot]:
        """The shared root of this check's function, made on first use; None when the
        function has no other variant in the session (nothing to share with)."""
        group = group_of(nodeid)
        if self.groups.get(group, 0) < 2:
            return None
        slug = "".join(c if c.isalnum() else "-" for c in group.split("::")[-1])[:40]
        name = f"{slug}-{hashlib.sha256(group.encode()).hexdigest()[:12]}"
        path = self.parent / name
        lock = self.parent / f"{name}.lock"
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:  # made once, by whichever variant comes first
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                os.mkdir(path, 0o700)
                for part in ROOT_PARTS:
                    os.mkdir(path / part, 0o700)
            except FileExistsError:
                pass
        finally:
            os.close(fd)
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise OSError(f"the shared cache root {path} is not this user's private directory "
                          f"(mode {stat.S_IMODE(st.st_mode):o}, uid {st.st_uid}); refusing it")
        return SharedRoot(CacheRoot(path, (st.st_dev, st.st_ino)), lock)


def open_parent(root_setting: Optional[str]) -> Path:
    """The controller's directory of shared roots (a CacheRoot, so `clean` knows it);
    its path travels to xdist workers in the environment, as the header dir's does."""
    made = CacheRoot.create("shared-variants", root_setting).path
    os.environ[SHARED_DIR_ENV] = str(made)
    return made


def groups_of(nodeids: List[str]) -> Dict[str, int]:
    """How many checks each test function has in the session."""
    out: Dict[str, int] = {}
    for n in nodeids:
        out[group_of(n)] = out.get(group_of(n), 0) + 1
    return out


def take_turn(run: Any, shared: Any, plan: Any, env_extra: Dict[str, str]) -> Tuple[Any, Any]:
    """This variant's turn over the cache its function's variants share (one at a
    time): run the phase there, enter what it wrote in the root's ledger, and give
    its record what the ledger said of the others' entries before it. Its files
    (spec, record, log) go to the check's own root, kept with it."""
    me = Variant(run.item.nodeid, getattr(run.item, "params_id", ""),
                 getattr(run.item, "params", {}))
    with shared.turn():
        before = shared.written()
        rec, failure = run.run_phase(shared.root, plan.name, extra=run.extra(plan, shared.root),
                                     env_extra=env_extra)
        if rec is not None:  # the ledger is JSON: what the turn wrote, passed on as written
            rec.variants = rec.raw["variants"] = seen_by(before, rec.raw, me)
            shared.record(me, rec.raw)
        for name in (f"{plan.name}-spec.json", f"{plan.name}.json", f"{plan.name}.log"):
            with contextlib.suppress(OSError):
                shutil.move(str(shared.root.phases / name), str(run.roots[0].phases / name))
        shutil.rmtree(shared.root.phases / f"basetemp-{plan.name}", ignore_errors=True)
    run.shared_root = shared.root.path
    return rec, failure

