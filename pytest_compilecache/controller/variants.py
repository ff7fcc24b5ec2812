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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Set, Tuple

from pytest_compilecache import adopted
from pytest_compilecache import files as fs
from pytest_compilecache.controller import written
from pytest_compilecache.controller.written import LAYERS, LEDGER, Ledger
from pytest_compilecache.isolation import ROOT_PARTS, CacheRoot
from pytest_compilecache.layers.keys import EXTENSION
from pytest_compilecache.model import error_result

SHARED_DIR_ENV = "PYTEST_COMPILECACHE_SHARED_DIR"


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

    def ledger(self) -> Ledger:
        """What the turns before saved here (written.Damaged where it cannot say)."""
        return written.load(self.root.phases / LEDGER)

    def record(self, variant: Variant, rec: Mapping[str, Any], own_saved: Set[str]
               ) -> Dict[str, Dict[str, Any]]:
        """After a turn: enter the entries it saved here (a key already written by an
        earlier turn keeps its first writer), and those it could not save (its own cold
        run saved them): returned, for its verdict."""
        ledger = self.ledger()
        unsaved = written.after_turn(ledger, variant.to_json(), rec, self.root.inductor,
                                     own_saved)
        written.save(self.root.phases / LEDGER, ledger)
        return unsaved


def seen_by(ledger: Ledger, rec: Mapping[str, Any], me: Variant) -> Dict[str, Any]:
    """What the judge needs of the ledger for one turn: this variant, the entries other
    variants wrote that it loaded (its hits on their keys), those it did not (for
    saying which components kept it from them), and `missing`: the keys it compiled
    that another variant compiled before it and could not save (it would have loaded them)."""
    hit = {e.get("key") for events in ((rec.get("cache") or {}).get("graphs") or {}).values()
           for layer in LAYERS for e in (events or {}).get(layer) or []
           if e.get("state") == "hit"}
    others = {k: v for k, v in ledger.entries.items() if v["writer"]["nodeid"] != me.nodeid}
    compiled = {str(e["key"]) for _, _, e in written.missed(rec)}
    missing = {k: v for k, v in ledger.unsaved.items()
               if k in compiled and v["writer"]["nodeid"] != me.nodeid}
    return {"variant": me.to_json(),
            "loaded": {k: _named(v) for k, v in others.items() if k in hit},
            "not_loaded": dict(list((k, v) for k, v in others.items() if k not in hit)[:16]),
            "writers": sorted({v["writer"]["nodeid"] for v in others.values()}),
            "missing": dict(list(missing.items())[:16])}


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
        path, lock = self.parent / name, self.parent / f"{name}.lock"
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:  # made once, by whichever variant comes first; never again (take_turn)
            fcntl.flock(fd, fcntl.LOCK_EX)
            made = _made(self.parent / f"{name}.made") or _make(path)
        finally:
            os.close(fd)
        why = adopted.problem(path) if os.path.lexists(path) else None  # gone: its turn says
        if why is not None:
            raise adopted.UnsafeDir(
                f"the shared cache root {path} is not this user's private directory: it {why}; "
                f"another user could put files there that this turn would load and run; an "
                f"environment fault, not the plugin's or the model's: find what changed it "
                f"(a chown, a cleanup job), and run again over a --compile-cache-root only "
                f"you can write")
        return SharedRoot(CacheRoot(path, made), lock)


def _made(record: Path) -> Optional[Tuple[int, int]]:
    """The (device, inode) the root was made with, or None where it is not made yet."""
    try:
        dev, ino = record.read_text().split()
        return int(dev), int(ino)
    except (OSError, ValueError):
        return None


def _make(path: Path) -> Tuple[int, int]:
    """The shared root and its parts, its (device, inode) kept beside it: a root gone
    or replaced later is told from the first variant's (CacheRoot.tampered)."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
        for part in ROOT_PARTS:
            os.mkdir(path / part, 0o700)
    st = os.lstat(path)
    record = path.with_name(f"{path.name}.made")
    write_text = f"{st.st_dev} {st.st_ino}\n"
    fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(write_text)
    return st.st_dev, st.st_ino


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
    time): run the phase there, enter what it saved in the root's ledger, and give
    its record what the ledger said of the others' entries before it. Its files
    (spec, record, log) go to the check's own root, kept with it. A root gone or
    replaced since it was made, or a ledger that cannot say who wrote what, is an
    error: the turn would judge on outputs alone and pass a false hit."""
    me = Variant(run.item.nodeid, getattr(run.item, "params_id", ""),
                 getattr(run.item, "params", {}))
    with shared.turn():
        try:
            before = _before(shared)
        except written.Damaged as e:
            return None, error_result(me.nodeid, plan.name, f"was not run: {e}", "",
                                      run.timings)
        rec, failure = run.run_phase(shared.root, plan.name, extra=run.extra(plan, shared.root),
                                     env_extra=env_extra)
        if rec is not None:  # the ledger is JSON: what the turn wrote, passed on as written
            seen = rec.variants = rec.raw["variants"] = seen_by(before, rec.raw, me)
            seen["root"] = str(shared.root.path)
            try:
                seen["unsaved"] = shared.record(me, rec.raw, fs.saved_keys(
                    run.snaps.get("cold") or {}))
            except written.Damaged as e:
                seen["unusable"] = str(e)
        for name in (f"{plan.name}-spec.json", f"{plan.name}.json", f"{plan.name}.log"):
            with contextlib.suppress(OSError):
                shutil.move(str(shared.root.phases / name), str(run.roots[0].phases / name))
        shutil.rmtree(shared.root.phases / f"basetemp-{plan.name}", ignore_errors=True)
    run.shared_root = shared.root.path
    return rec, failure


def _before(shared: SharedRoot) -> Ledger:
    """The ledger before this turn, in the root the first variant's turn was given."""
    gone = shared.root.tampered()
    if gone:
        what = ("is gone since it was made for the first variant's turn"
                if not os.path.lexists(shared.root.path) else f"is refused: {gone}")
        raise written.Damaged(
            f"the cache root this test function's variants share, {shared.root.path}, {what}; "
            f"this turn would start cold and load none of the entries the others saved, so "
            f"a false hit would pass unseen; {written.FIX}")
    return shared.ledger()
