"""The key components of the store's manifests, kept once per content digest: a graph's
~640 components (~75 KB of JSON, the graph code among them) are the same at most
commits, in most checks of a model, cold and warm, so a manifest row keeps only their
digest (layers/keys.components_digest) and drift, bisect and `diff` load them from here.

    <store>/components/<first 2 hex digits>/<digest>.json.gz

Written atomically (a reader never sees half a file) into 0700 directories; read back
only after checking that the text is what its name says. No pytest, no torch.
"""
from __future__ import annotations

import contextlib
import gzip
import json
import os
import tempfile
from pathlib import Path
from typing import Any, List, Optional

from pytest_compilecache import jsonfile
from pytest_compilecache.history.manifest import BadManifest, repair_hint
from pytest_compilecache.layers.keys import components_digest

DIR = "components"
MISSING = "missing"
MAX_BYTES = 64 << 20  # one graph's components are ~100 KB; a copied store may hold anything


class BadComponents(BadManifest):
    """A manifest row's components that are missing or unreadable in the store: names the
    file, the manifest that needs it and the repair, in one line."""

    def __init__(self, path: Any, why: str, manifest: Any) -> None:
        self.manifest = str(manifest)
        ValueError.__init__(self, f"the key components {path} that {manifest} names are "
                                  f"unusable: {why}; " + ("" if why.startswith(MISSING) else
                                                          f"delete {path}, then ")
                                  + repair_hint(manifest))
        self.path, self.why, self.newer = str(path), why, False

    def __reduce__(self) -> Any:
        return (type(self), (self.path, self.why, self.manifest))


class ComponentBlobs:
    def __init__(self, store_root: Path) -> None:
        self.root = Path(store_root) / DIR

    def path(self, digest: str) -> Path:
        return self.root / digest[:2] / f"{digest}.json.gz"

    def put(self, components: List[Any]) -> str:
        """Keep `components` under their digest (unless a readable copy is there) and
        return the digest."""
        digest = components_digest(components)
        p = self.path(digest)
        if self._read(p, digest)[1] is None:
            return digest
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)  # 0700 before its contents
        with contextlib.suppress(OSError):
            os.chmod(self.root, 0o700)
        p.parent.mkdir(mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
                f.write(json.dumps(components, ensure_ascii=True).encode("ascii"))
            os.replace(tmp, p)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return digest

    def get(self, digest: str, manifest: Any) -> List[Any]:
        """The components of `digest`; BadComponents naming the file and `manifest` (the
        file whose row named it) when they are missing or damaged."""
        p = self.path(digest)
        comps, why = self._read(p, digest)
        if why is not None:
            raise BadComponents(p, why, manifest)
        assert comps is not None
        return comps

    @staticmethod
    def _read(p: Path, digest: str) -> "tuple[Optional[List[Any]], Optional[str]]":
        """(the components, None), or (None, what is wrong with the file)."""
        try:
            data = jsonfile.load(p, gz=True, limit=MAX_BYTES)  # capped: a copied store
        except FileNotFoundError:
            return None, f"{MISSING} (a store copied without its components/ directory?)"
        except jsonfile.Unreadable as e:  # truncated, not gzip, not JSON, too deep
            return None, f"cannot be read ({e.why})"
        if not isinstance(data, list) or components_digest(data) != digest:
            return None, "its content does not match its digest"
        return data, None
