"""The mega-cache (--compile-cache-via=mega): torch.compiler.save_cache_artifacts() bytes
saved by the cold process, load_cache_artifacts() in the warm one, on an empty cache root
at another path."""
from __future__ import annotations

import time
import traceback
from pathlib import Path
from typing import Any, Optional

from pytest_compilecache.layers.base import Carrier
from pytest_compilecache.paths.artifact import ArtifactPath, artifact_counts
from pytest_compilecache.paths.base import Info


class MegaCache(ArtifactPath):
    """torch.compiler.save_cache_artifacts() bytes (torch 2.7+)."""
    name = via = "mega"
    summary = "mega (torch.compiler.save_cache_artifacts, torch 2.7+)"
    loader = "load_cache_artifacts"
    carrier = Carrier("the mega-cache", "torch.compiler.save_cache_artifacts keeps no compiled "
                                        ".so objects: pytorch#172542, #155332")
    since = "2.7"

    def not_applicable(self, form: str, case: Any) -> Optional[str]:
        import torch

        if getattr(torch.compiler, "save_cache_artifacts", None) is None:
            return (f"torch {torch.__version__} has no torch.compiler.save_cache_artifacts "
                    f"(torch {self.since}+)")
        return None

    def after(self, phase: str, path: Path, info: Info) -> None:
        if phase != "cold":
            return
        import torch

        try:
            saved = torch.compiler.save_cache_artifacts()
        except Exception:
            info["error"] = ("torch.compiler.save_cache_artifacts() failed:\n"
                             + traceback.format_exc(limit=4))
            return
        if saved is None:
            info["error"] = ("torch.compiler.save_cache_artifacts() returned nothing: no "
                             "cache artifact was recorded")
            return
        data, cache_info = saved
        path.write_bytes(data)
        info.update(bytes=len(data), counts=artifact_counts(cache_info))

    def before(self, phase: str, path: Path, info: Info) -> None:
        if phase != "warm":
            return
        import torch

        if not path.exists():
            info["error"] = "the cold process saved no artifact"
            return
        t0 = time.perf_counter()
        try:
            loaded = torch.compiler.load_cache_artifacts(path.read_bytes())
        except Exception:
            info["error"] = ("torch.compiler.load_cache_artifacts failed on the cold "
                             "process's artifact:\n" + traceback.format_exc(limit=4))
            return
        info["load_s"] = round(time.perf_counter() - t0, 3)
        if loaded is None:  # torch only logs "Failed to un-pickle cache artifacts"
            info["error"] = ("torch.compiler.load_cache_artifacts() returned None: it could "
                             "not read the cold process's artifact (damaged or truncated?), "
                             "and loaded nothing")
        else:
            info["counts"] = artifact_counts(loaded)
