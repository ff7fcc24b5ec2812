"""The manifest store: one JSON file per commit and environment, safe for concurrent
writers (xdist workers, parallel pytest sessions): every write is a locked
read-merge-write of the check entries, then an atomic rename.

    <store>/manifests/<environment id>/<sha>.json        (a clean commit)
    <store>/manifests/<environment id>/<sha>-dirty.json  (a dirty work tree; replaced)

No pytest, no torch; filelock for the locks.
"""
from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

from pytest_compilecache import manifest as mf
from pytest_compilecache.files import write_json_atomic

DEFAULT_DIR = ".compilecache"
LOCK_TIMEOUT_S = 600.0


class ManifestStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.replaced_damaged: List[str] = []  # unreadable manifests merge() started anew

    def _ensure(self) -> None:
        if not self.root.is_dir():
            self.root.mkdir(parents=True, exist_ok=True)
        ignore = self.root / ".gitignore"
        if not ignore.exists():  # the store must not make the work tree dirty
            with contextlib.suppress(OSError):
                ignore.write_text("# created by pytest-compilecache\n*\n")
        (self.root / "locks").mkdir(mode=0o700, exist_ok=True)

    @contextlib.contextmanager
    def lock(self, name: str, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
        from filelock import FileLock

        self._ensure()
        with FileLock(str(self.root / "locks" / f"{name}.lock"), timeout=timeout):
            yield

    def path(self, env_id: str, sha: str, dirty: bool = False) -> Path:
        return self.root / "manifests" / env_id / (f"{sha}-dirty.json" if dirty else f"{sha}.json")

    def load(self, env_id: str, sha: str, dirty: bool = False) -> Optional[Dict[str, Any]]:
        return self._read(self.path(env_id, sha, dirty))[0]

    @staticmethod
    def _read(p: Path) -> Tuple[Optional[Dict[str, Any]], bool]:
        """(the manifest, or None; whether a file was there but unusable)."""
        try:
            data = json.loads(p.read_text())
        except FileNotFoundError:
            return None, False
        except (OSError, ValueError):
            return None, True
        if mf.problem(data) is not None:
            return None, True
        return data, False

    def merge(self, commit: Dict[str, Any], env: Dict[str, Any],
              checks: Dict[str, Dict[str, Any]]) -> Path:
        """Add or replace these checks' entries in the commit's manifest; keep the rest."""
        env_id = mf.environment_id(env)
        sha = commit.get("sha") or "unknown"
        dirty = bool(commit.get("dirty"))
        p = self.path(env_id, sha, dirty)
        with self.lock(f"{env_id}-{sha}"):
            data, damaged = self._read(p)
            if damaged:  # its other checks' entries are lost: say so
                self.replaced_damaged.append(str(p))
            data = data or mf.new_manifest(commit, env)
            data["checks"].update(checks)
            data["commit"] = commit
            write_json_atomic(p, data, sort_keys=True)
        return p
