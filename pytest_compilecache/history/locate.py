"""Where the key components of a report or manifest file are, for `diff`: the rows of a
stored manifest, and a report's rows of graphs that needed no explaining, keep only their
digest, and the components are in a store's blobs (history/blobs.py). No pytest, no torch."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

from pytest_compilecache.history import manifest as mf
from pytest_compilecache.history.blobs import MISSING, BadComponents
from pytest_compilecache.history.store import ManifestStore


def components_loader(data: Dict[str, Any], keys: Dict[str, Any], path: str,
                      store: Optional[str]) -> mf.Loader:
    """How the rows of the file at `path` (`data`; `keys`: its manifest form) get their
    components: from `store` (--store), else a manifest's own store (the one its path is
    in) or the store a report names. A manifest's missing or damaged components are an
    error naming the files; a report's, whose store is another machine's, show their
    digest (a damaged file that is there is still an error)."""
    manifest = mf.is_manifest(data)
    root = (store or (str(Path(path).parents[2]) if manifest and
                      Path(path).parent.parent.name == "manifests" else None)
            or (None if manifest else (data.get("settings") or {}).get("store")))
    if not root:
        return _needs_store(path) if manifest else mf.inline
    load = ManifestStore(Path(root)).loader(keys, named_by=path if manifest else None)
    if manifest:
        return load

    def lenient(row: Dict[str, Any]) -> Optional[List[Any]]:
        try:
            return load(row)
        except BadComponents as e:
            if e.why.startswith(MISSING):
                return None
            raise
    return lenient


def _needs_store(path: str) -> mf.Loader:
    def load(row: Dict[str, Any]) -> Optional[List[Any]]:
        comps = mf.inline(row)
        if comps is None:
            raise mf.NoStore(f"{path} keeps its key components in a store (components/ "
                             f"beside its manifests/ directory): pass --store with that store")
        return comps
    return load
