"""Autotuning that really runs in a phase process, observed where torch runs it.

torch replays the cold compile's `counters["inductor"]` on an FX-graph cache hit
(`counters["inductor"] += graph.counter_deltas`, torch/_inductor/codecache.py), so
`select_algorithm_autotune` and `coordesc_tuning_bench` read the same in a warm process
that tuned nothing. Instead each kind of tuning is counted by wrapping the method that
does the work, for the phase's workload only:

- template selection (max-autotune GEMM/conv): the benchmark of the choices, which the
  local autotune cache skips on a hit: the `benchmark` callable PersistentCache.lookup
  is handed, run only on a miss (torch 2.5-2.15), else AlgorithmSelectorCache's method;
- config benchmarks of a Triton kernel at its first launch, which a `.best_config` file
  skips (CachingAutotuner.benchmark_all_configs);
- coordinate-descent tuning of a kernel (CoordescTuner.autotune).

For each kernel tuned, the record also says what its stored result (`.best_config`)
held just before: nothing, a result for another config list, a config this torch does
not reload (torch 2.11 re-tunes a kernel whose coordinate-descent winner lies outside
its starting configs at every start; 2.13 reloads it), or no cache at all (a kernel
with one config at compile time gets none, so torch tunes it at every start: not a
miss).

Each spy is feature-detected: a torch without the method has that kind unobserved, and
the record says so; layers/tuning.py reads the record. Runs in the child; torch imported
lazily; no pytest.
"""
from __future__ import annotations

import functools
import importlib
import json
from typing import Any, Callable, Dict, List, Optional, Tuple

from pytest_compilecache.terms import (CACHE_OFF, IGNORED, NO_CACHE, NOT_RELOADED,
                                       NOT_STORED, OTHER_LIST)


def _selection_name(self: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> str:
    """The op a selection benchmarks: its `name` argument where the method has one,
    else the first choice's name."""
    if args and isinstance(args[0], str):
        return args[0]
    if isinstance(kwargs.get("name"), str):
        return kwargs["name"]
    choices = kwargs.get("choices") or (args[0] if args else None)
    first = choices[0] if isinstance(choices, (list, tuple)) and choices else None
    return str(getattr(first, "name", "?"))


def _lookup_op(self: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> str:
    """PersistentCache.lookup(choices, op, inputs, benchmark): the op it benchmarks."""
    op = args[1] if len(args) > 1 else kwargs.get("op")
    return str(op or "?")


def _lookup_benchmark(args: Tuple[Any, ...], kwargs: Dict[str, Any]
                      ) -> Tuple[Any, Callable[[Any], Tuple[Tuple[Any, ...], Dict[str, Any]]]]:
    """lookup's `benchmark` argument and how to put a replacement in its place."""
    if len(args) > 3:
        return args[3], lambda new: (args[:3] + (new,) + args[4:], kwargs)
    return kwargs.get("benchmark"), lambda new: (args, {**kwargs, "benchmark": new})


def _kernel_name(self: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> str:
    meta = getattr(self, "inductor_meta", None) or {}
    name = meta.get("kernel_name") if isinstance(meta, dict) else None
    return str(name or getattr(getattr(self, "fn", None), "__name__", None) or "?")


def _tuner_name(self: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> str:
    return str(getattr(self, "name", None) or "?")


# kind -> candidate (module, class, method, namer), the first that exists is wrapped.
# PersistentCache.lookup(choices, op, inputs, benchmark) calls `benchmark` only when the
# local autotune cache misses, on every torch 2.5-2.15: its calls are the selections
# really tuned (the `lookup` entry counts those, not lookup's own calls). The methods
# after it run only on a miss too, for a torch whose lookup has another shape.
SPIES: Dict[str, List[Tuple[str, str, str, Callable[..., str]]]] = {
    "select": [
        ("torch._inductor.codecache", "PersistentCache", "lookup", _lookup_op),
        ("torch._inductor.select_algorithm", "AlgorithmSelectorCache", "autotune", _selection_name),
        ("torch._inductor.select_algorithm", "AlgorithmSelectorCache", "benchmark",
         _selection_name),
        ("torch._inductor.select_algorithm", "AlgorithmSelectorCache",
         "benchmark_example_value_and_choices", _selection_name),
    ],
    "configs": [
        ("torch._inductor.runtime.triton_heuristics", "CachingAutotuner", "benchmark_all_configs",
         _kernel_name),
        ("torch._inductor.triton_heuristics", "CachingAutotuner", "benchmark_all_configs",
         _kernel_name),
    ],
    "coordesc": [
        ("torch._inductor.runtime.coordinate_descent_tuner", "CoordescTuner", "autotune",
         _tuner_name),
        ("torch._inductor.coordinate_descent_tuner", "CoordescTuner", "autotune", _tuner_name),
    ],
}


# Where a kernel's coordinate-descent tuning starts, to read its stored result first.
REASON_SPIES = [
    ("torch._inductor.runtime.triton_heuristics", "CachingAutotuner", "coordinate_descent_tuning"),
    ("torch._inductor.triton_heuristics", "CachingAutotuner", "coordinate_descent_tuning"),
]


class TuningSpy:
    """The autotune layer's observer (layers/autotune.py names it): start() before the
    workload, stop() after; record() is JSON, the layer's section of the record."""

    def __init__(self) -> None:
        self.seen: Dict[str, List[str]] = {k: [] for k in SPIES}  # kind -> kernels or ops
        self.why: Dict[str, str] = {}  # kernel -> what its stored tuning result was
        self.watched: Dict[str, str] = {}  # kind -> the method wrapped
        self.unwatched: Dict[str, str] = {}  # kind -> why not
        self._undo: List[Callable[[], None]] = []

    def start(self) -> None:
        for module, cls_name, method in REASON_SPIES:
            target = _find(module, cls_name, method)
            if target is not None:
                self._wrap_reason(target[0], method, target[1])
                break
        for kind, candidates in SPIES.items():
            for module, cls_name, method, namer in candidates:
                target = _find(module, cls_name, method)
                if target is None:
                    continue
                self._wrap(kind, target[0], method, target[1], namer)
                self.watched[kind] = f"{cls_name}.{method}"
                break
            else:
                self.unwatched[kind] = ("this torch has none of " + ", ".join(
                    f"{c}.{m}" for _, c, m, _ in candidates))

    def _wrap(self, kind: str, cls: Any, method: str, raw: Any,
              namer: Callable[..., str]) -> None:
        original = getattr(cls, method)
        seen = self.seen[kind]

        if method == "lookup":
            @functools.wraps(original)
            def wrapper(this: Any, *args: Any, **kwargs: Any) -> Any:
                benchmark, replace = _lookup_benchmark(args, kwargs)
                if not callable(benchmark):
                    return original(this, *args, **kwargs)
                name = namer(this, args, kwargs)

                def counted(*a: Any, **k: Any) -> Any:
                    seen.append(name)
                    return benchmark(*a, **k)

                args, kwargs = replace(counted)
                return original(this, *args, **kwargs)
        else:
            why = self.why if kind == "configs" else None

            @functools.wraps(original)
            def wrapper(this: Any, *args: Any, **kwargs: Any) -> Any:
                try:
                    name = namer(this, args, kwargs)
                    if why is not None:
                        why.setdefault(name, stored_result(this))
                except Exception:
                    name = "?"
                seen.append(name)
                return original(this, *args, **kwargs)

        setattr(cls, method, wrapper)
        self._undo.append(lambda: setattr(cls, method, raw))

    def _wrap_reason(self, cls: Any, method: str, raw: Any) -> None:
        """Coordinate descent starts from the kernel's autotuner: read what its stored
        result was there (the tuner itself is counted by CoordescTuner.autotune)."""
        original = getattr(cls, method)
        why = self.why

        @functools.wraps(original)
        def wrapper(this: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                why.setdefault(_kernel_name(this, args, kwargs), stored_result(this))
            except Exception:
                pass
            return original(this, *args, **kwargs)

        setattr(cls, method, wrapper)
        self._undo.append(lambda: setattr(cls, method, raw))

    def stop(self) -> None:
        for undo in reversed(self._undo):
            try:
                undo()
            except Exception:
                pass
        self._undo.clear()

    def record(self, trace: Any = None) -> Dict[str, Any]:
        return {"seen": {k: list(v) for k, v in self.seen.items()}, "why": dict(self.why),
                "watched": dict(self.watched), "unwatched": dict(self.unwatched)}


def stored_result(tuner: Any) -> str:
    """Why a CachingAutotuner benchmarks its configs: what its `.best_config` holds,
    read before the benchmark overwrites it. '' where this torch's autotune cache
    cannot be read this way (local cache off, another layout)."""
    hook = getattr(tuner, "save_cache_hook", False)
    if hook is None:
        meta = getattr(tuner, "inductor_meta", None) or {}
        if meta.get("force_disable_caches") or meta.get("autotune_local_cache") is False:
            return CACHE_OFF
        return NO_CACHE
    cache = getattr(hook, "__self__", None)
    local = getattr(cache, "local_cache", None)
    if not (isinstance(local, tuple) and len(local) == 2 and isinstance(local[1], str)):
        return ""
    try:
        with open(local[1]) as f:
            data = json.load(f)
    except FileNotFoundError:
        return NOT_STORED
    except (OSError, ValueError):
        return "its stored result cannot be read"
    if not isinstance(data, dict):
        return "its stored result cannot be read"
    if data.get("configs_hash") != getattr(cache, "configs_hash", None):
        return OTHER_LIST
    for cfg in getattr(tuner, "configs", None) or []:
        kw = getattr(cfg, "kwargs", {}) or {}
        if (all(data.get(k) == v for k, v in kw.items())
                and getattr(cfg, "num_warps", None) == data.get("num_warps")
                and getattr(cfg, "num_stages", None) == data.get("num_stages")):
            return IGNORED
    return NOT_RELOADED


def _find(module: str, cls_name: str, method: str) -> Optional[Tuple[Any, Any]]:
    """(the class, the method as stored on it) or None when this torch lacks it."""
    try:
        cls = getattr(importlib.import_module(module), cls_name)
    except Exception:
        return None
    raw = cls.__dict__.get(method)
    if raw is None or isinstance(raw, (staticmethod, classmethod)):
        return None
    return cls, raw
