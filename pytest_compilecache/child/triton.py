"""The kernels layer's observer (layers/kernels.py names it): Triton compiles in the
phase, through Triton's compilation listener (triton >= 3.6; without it, the record says
so and the layer judges from the files the phase wrote), the kernels Inductor's trace
says it compiled through Triton, and TRITON_PTXAS_PATH before and after the workload
(torch 2.11 sets it lazily on some compile paths; ptxas's version is in Triton's key).
Runs in the child; no pytest."""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Sequence

PTXAS_ENV = "TRITON_PTXAS_PATH"


COMPILED_NAMES = 500  # names kept in the record


class TritonObserver:
    def __init__(self) -> None:
        self.compiles: List[Dict[str, Any]] = []
        self.listening = False
        self._ptxas_at_start: Optional[str] = None
        self._undo: Optional[Callable[[], None]] = None

    def start(self) -> None:
        self._ptxas_at_start = os.environ.get(PTXAS_ENV)
        try:
            from triton import knobs  # type: ignore[import-not-found]  # triton >= 3.6

            prev = knobs.compilation.listener
        except Exception:
            return
        sink = self.compiles

        def listener(*, src: Any, metadata: Any, metadata_group: Any, times: Any,
                     cache_hit: Any, **kw: Any) -> None:
            name = metadata.get("name") if isinstance(metadata, dict) else None
            sink.append({"name": name, "cache_hit": bool(cache_hit)})
            if prev:
                prev(src=src, metadata=metadata, metadata_group=metadata_group, times=times,
                     cache_hit=cache_hit, **kw)

        knobs.compilation.listener = listener
        self._undo = lambda: setattr(knobs.compilation, "listener", prev)
        self.listening = True

    def stop(self) -> None:
        if self._undo is not None:
            self._undo()
            self._undo = None

    def record(self, trace: Sequence[Any] = ()) -> Dict[str, Any]:
        autotune_states: List[str] = []
        via_triton = 0
        for name, _, data in trace:
            if name == "triton_kernel_info" and isinstance(data, dict):
                for v in data.values():
                    via_triton += 1
                    if isinstance(v, dict) and v.get("autotune_cache_state"):
                        autotune_states.append(str(v["autotune_cache_state"]))
        return {
            "triton_listener": self.listening,
            "triton_compiled": (sum(not e["cache_hit"] for e in self.compiles)
                                if self.listening else None),
            "triton_disk_hits": (sum(e["cache_hit"] for e in self.compiles)
                                 if self.listening else None),
            # the kernels compiled, by name (bounded): tuning's compiles are told apart
            "compiled_names": [str(e["name"]) for e in self.compiles
                               if not e["cache_hit"]][:COMPILED_NAMES],
            "kernels_via_triton_compile": via_triton,
            "autotune_cache_states": autotune_states,
            "ptxas_path": {"start": self._ptxas_at_start, "end": os.environ.get(PTXAS_ENV)},
        }
