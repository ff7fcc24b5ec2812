"""One rank of a multi-rank check (`compile_cache(ranks=N)`), in its phase child: the
process group around the test (created before it, as torchrun's program does at its
start; destroyed after), and what the rank's compile wrote into the cache root.

The ranks of a phase share one cache root (as a node's ranks share its cache dir), so
which rank wrote an entry is only known here: the write of every FX graph and
AOTAutograd entry is observed (the bytes' digest by file, nothing changed), and the
controller matches them with the files the root holds after the phase. A rank whose
peer failed would wait in a collective until the group's timeout: the controller
leaves an abort file, and a watcher thread ends the rank at once, saying why.
"""
from __future__ import annotations

import datetime
import functools
import hashlib
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional

import pytest

# what the FX graph and AOTAutograd caches write their entries with (torch 2.4+)
_WRITERS = (("torch._inductor.codecache", "write_atomic"),
            ("torch._functorch._aot_autograd.autograd_cache", "write_atomic"))
_ENTRY_DIRS = ("fxgraph", "aotautograd")
ABORTED_EXIT = 75  # the rank was ended because another rank of its phase failed


class RankGroup:
    """The rank's process group and its record (`result["rank"]`)."""

    def __init__(self, result: Dict[str, Any], spec: Mapping[str, Any], device: Optional[str]
                 ) -> None:
        self.rank, self.world = int(spec["rank"]), int(spec["world_size"])
        self.grouped = bool(spec.get("process_group", True))  # replicas: none
        self.backend = ("nccl" if device == "cuda" else "gloo") if self.grouped else None
        self.writes: Dict[str, str] = {}  # file, relative to the inductor dir -> sha256
        self.sizes: Dict[str, int] = {}  # the same files -> the bytes written
        self.record: Dict[str, Any] = {"rank": self.rank, "world_size": self.world,
                                       "backend": self.backend, "writes": self.writes,
                                       "sizes": self.sizes}
        result["rank"] = self.record
        self._undo: List[Callable[[], None]] = []
        self._timeout = float(spec.get("timeout_s") or 0) or 1800.0
        _watch_abort(spec.get("ranks_abort"), self.rank)

    def start(self) -> None:
        """The group, from torchrun's environment (the controller set it), where the
        phase's processes form one (ranks; replicas do not): the writes observed in
        either case."""
        import torch.distributed as dist

        from pytest_compilecache.child import once

        self._undo = _spy_writes(self.writes, self.sizes)
        if once.prepare(self.record, self.rank) or not self.grouped:
            return
        t0 = time.monotonic()
        dist.init_process_group(str(self.backend),
                                timeout=datetime.timedelta(seconds=self._timeout))
        self.record["rendezvous_s"] = round(time.monotonic() - t0, 3)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self) -> None:
        """Before the record is written: the group ends with the test, as the
        program's own destroy_process_group would end it."""
        import torch.distributed as dist

        for undo in self._undo:
            undo()
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


def start(config: Any, result: Dict[str, Any], spec: Mapping[str, Any],
          device: Optional[str]) -> None:
    """In a phase child whose spec names a rank: the group, registered for its end."""
    group = RankGroup(result, spec, device)
    try:
        group.start()
    except Exception as e:  # the rendezvous: the plugin's step, said as such
        result["error"] = (f"rank {group.rank} of {group.world}: creating the process group "
                           f"({group.backend}, env rendezvous) failed: {type(e).__name__}: "
                           f"{str(e).splitlines()[0] if str(e) else ''}")
    config.pluginmanager.register(group, "compilecache-child-rank")


def _spy_writes(writes: Dict[str, str], sizes: Dict[str, int]) -> List[Callable[[], None]]:
    """Observe the cache entries torch writes: their digest by file; torch's own
    function does the write."""
    import importlib

    undo: List[Callable[[], None]] = []
    for module_name, attr in _WRITERS:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        original = getattr(module, attr, None)
        if original is None:
            continue
        setattr(module, attr, _observed(original, writes, sizes))
        undo.append(functools.partial(setattr, module, attr, original))
    return undo


def _observed(original: Callable[..., Any], writes: Dict[str, str], sizes: Dict[str, int]
              ) -> Callable[..., Any]:
    def write_atomic(path: Any, content: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(path, content, *args, **kwargs)
        rel = _entry_file(str(path))
        if rel is not None:
            data = content.encode() if isinstance(content, str) else bytes(content)
            writes[rel] = hashlib.sha256(data).hexdigest()
            sizes[rel] = len(data)
        return out
    return write_atomic


def _entry_file(path: str) -> Optional[str]:
    """The file's path under the inductor cache dir, where it is an entry's."""
    parts = Path(path).parts
    for i, part in enumerate(parts):
        if part in _ENTRY_DIRS:
            return "/".join(parts[i:])
    return None


def _watch_abort(abort_file: Optional[str], rank: int) -> None:
    """End this rank once the controller says another rank of the phase failed."""
    if not abort_file:
        return

    def watch() -> None:
        while not os.path.exists(abort_file):
            time.sleep(0.2)
        try:
            why = Path(abort_file).read_text().strip()
        except OSError:
            why = "another rank failed"
        sys.stderr.write(f"pytest-compilecache: rank {rank} ended: {why}\n")
        sys.stderr.flush()
        os._exit(ABORTED_EXIT)

    threading.Thread(target=watch, name="compilecache-rank-abort", daemon=True).start()
