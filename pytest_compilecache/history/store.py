"""The manifest store: one JSON file per commit and environment, safe for concurrent
writers (xdist workers, parallel pytest sessions): every write is a locked
read-merge-write of the check entries, then an atomic rename.

    <store>/manifests/<environment id>/<sha>.json        (a clean commit)
    <store>/manifests/<environment id>/<sha>-dirty.json  (a dirty work tree; replaced)
    <store>/manifests/<environment id>/<sha>.v2.json     (beside a newer version's file)
    <store>/components/<2 hex>/<digest>.json.gz          (key components, once each)

No pytest, no torch; filelock for the locks.
"""
from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

from pytest_compilecache.history import manifest as mf
from pytest_compilecache.history.blobs import ComponentBlobs
from pytest_compilecache.files import write_json_atomic
from pytest_compilecache import jsonfile

DEFAULT_DIR = ".compilecache"
LOCK_TIMEOUT_S = 600.0


class ManifestStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.replaced_damaged: List[str] = []  # unreadable manifests merge() started anew
        self.damage: Dict[str, str] = {}  # each of those paths -> what was wrong with it
        self.kept_newer: Dict[str, str] = {}  # a file written beside -> the newer one kept
        self.blobs = ComponentBlobs(self.root)

    def ensure(self) -> None:
        """The store's directory, its .gitignore (it must not make the work tree dirty)
        and its locks directory."""
        if not self.root.is_dir():  # private whatever the umask: it may hold compile caches
            self.root.mkdir(parents=True, exist_ok=True)
            os.chmod(self.root, 0o700)
        ignore = self.root / ".gitignore"
        if not ignore.exists():  # the store must not make the work tree dirty
            with contextlib.suppress(OSError):
                ignore.write_text("# created by pytest-compilecache\n*\n")
        (self.root / "locks").mkdir(mode=0o700, exist_ok=True)

    @contextlib.contextmanager
    def lock(self, name: str, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
        from filelock import FileLock

        self.ensure()
        with FileLock(str(self.root / "locks" / f"{name}.lock"), timeout=timeout):
            yield

    def path(self, env_id: str, sha: str, dirty: bool = False) -> Path:
        return self.root / "manifests" / env_id / (f"{sha}-dirty.json" if dirty else f"{sha}.json")

    def read(self, env_id: str, sha: str, dirty: bool = False) -> Optional[Dict[str, Any]]:
        """The manifest, or None when there is none; a file that is there but unusable
        (truncated, undecodable, the wrong shape, a newer schema) raises BadManifest
        naming it, what is wrong and the repair: never a silent None, never a crash later."""
        p = self.path(env_id, sha, dirty)
        data, why, newer = self._read(p)
        if why is not None:
            raise mf.BadManifest(p, why, newer=newer)
        return data

    def load(self, env_id: str, sha: str, dirty: bool = False) -> Optional[Dict[str, Any]]:
        """As read(), but an unusable file counts as none: for a caller to whom a
        damaged manifest means nothing to list (a check that read() named already)."""
        return self._read(self.path(env_id, sha, dirty))[0]

    def environments_of(self, sha: str) -> List[str]:
        """The environments with a clean manifest of commit `sha`."""
        found = self.root.glob(f"manifests/*/{sha}.json") if sha and sha != "unknown" else []
        return sorted(p.parent.name for p in found)

    def recent(self, env_id: str, count: int) -> List[Dict[str, Any]]:
        """Up to `count` of the environment's clean-commit manifests, the latest written
        last; unusable ones are skipped (read as load() does)."""
        try:
            found = [p for p in (self.root / "manifests" / env_id).glob("*.json")
                     if not p.name.endswith("-dirty.json")]
            found.sort(key=lambda p: p.stat().st_mtime)
        except OSError:
            return []
        out = [self._read(p)[0] for p in found[-count:]] if count > 0 else []
        return [m for m in out if m is not None]

    @staticmethod
    def _read(p: Path) -> Tuple[Optional[Dict[str, Any]], Optional[str], bool]:
        """(the manifest, or None; why a file that is there is unusable, or None;
        whether a newer version wrote it)."""
        try:
            data = jsonfile.load(p)
        except FileNotFoundError:
            return None, None, False
        except jsonfile.Unreadable as e:  # truncated, undecodable, too deep or too big
            return None, f"cannot be read ({e.why})", False
        why = mf.problem(data)
        if why is not None:
            return None, why, mf.is_manifest(data) and mf.newer_schema(data)
        return data, None, False

    def merge(self, commit: Dict[str, Any], env: Dict[str, Any],
              checks: Dict[str, Dict[str, Any]]) -> Path:
        """Add or replace these checks' entries in the commit's manifest; keep the rest.
        An unusable one (truncated, the wrong shape: merged into, a bad entry would stay
        and break every reader) is started anew and named in replaced_damaged."""
        env_id = mf.environment_id(env)
        sha = commit.get("sha") or "unknown"
        dirty = bool(commit.get("dirty"))
        p = self.path(env_id, sha, dirty)
        with self.lock(f"{env_id}-{sha}"):
            data, damaged, newer = self._read(p)
            if newer:  # never rewritten by an older reader: its checks would be lost
                self.kept_newer[str(beside(p))] = str(p)
                p = beside(p)
                data, damaged, _ = self._read(p)
            if damaged is not None:  # its other checks' entries are lost: say so
                self.replaced_damaged.append(str(p))
                self.damage[str(p)] = damaged
            data = data or mf.new_manifest(commit, env)
            for nodeid, entry in checks.items():  # a recording keeps the run it replaces
                old = data["checks"].get(nodeid)
                if "run" not in entry and isinstance(old, dict) and "run" in old:
                    checks[nodeid] = {**entry, "run": old["run"]}
            data["checks"].update(checks)
            data["commit"], data["schema_version"] = commit, mf.SCHEMA_VERSION
            data["checks"] = {n: self._stored(e) for n, e in data["checks"].items()}
            write_json_atomic(p, data, sort_keys=True)
        return p

    def _stored(self, entry: Dict[str, Any]) -> Dict[str, Any]:
        """A check's entry as stored: each row's components go to the blobs (a version 1
        manifest's too, so that merging upgrades it), the row keeps their digest."""
        graphs = entry.get("graphs")
        if not isinstance(graphs, dict):
            return entry
        rows = {}
        for gid, row in graphs.items():
            comps = row.get("components") if isinstance(row, dict) else None
            if isinstance(comps, list):
                row = {k: v for k, v in row.items() if k != "components"}
                row.update(components_digest=self.blobs.put(comps), components_count=len(comps))
            rows[gid] = row
        return {**entry, "graphs": rows}

    def loader(self, manifest: Dict[str, Any], named_by: Any = None) -> mf.Loader:
        """How a comparison gets the components of `manifest`'s rows (read from this
        store): inline, else from the blobs, naming `named_by` (default: this manifest's
        file in the store) if they are missing or damaged."""
        if named_by is None:
            env, commit = manifest.get("environment") or {}, manifest.get("commit") or {}
            named_by = self.path(mf.environment_id(env), commit.get("sha") or "unknown",
                                 bool(commit.get("dirty")))

        def load(row: Dict[str, Any]) -> Optional[List[Any]]:
            comps = mf.inline(row)
            return comps if comps is not None else self.blobs.get(row["components_digest"],
                                                                  named_by)
        return load

    def inlined(self, manifest: Dict[str, Any]) -> Dict[str, Any]:
        """`manifest` with every row's components inline (to merge into another store)."""
        load = self.loader(manifest)
        return {**manifest, "checks": {
            n: {**e, "graphs": {g: {**row, "components": load(row)}
                                for g, row in (e.get("graphs") or {}).items()}}
            for n, e in manifest["checks"].items()}}


_BESIDE = re.compile(r"^(?P<sha>.+)\.v(?P<version>\d+)(?P<dirty>-dirty)?\.json$")


def beside(path: Path) -> Path:
    """Where this version writes a commit's manifest whose file a newer version wrote
    (`<sha>.v2.json`): the newer file keeps the checks only it can read; `recent` still
    tells a dirty one by its `-dirty.json`."""
    dirty = "-dirty" if path.name.endswith("-dirty.json") else ""
    stem = path.name[:-len(f"{dirty}.json")]
    return path.with_name(f"{stem}.v{mf.SCHEMA_VERSION}{dirty}.json")


def kept_beside(path: str) -> Optional[str]:
    """The newer version's manifest that `path` was written beside, or None."""
    m = _BESIDE.match(Path(path).name)
    if m is None:
        return None
    return str(Path(path).with_name(f"{m['sha']}{m['dirty'] or ''}.json"))
