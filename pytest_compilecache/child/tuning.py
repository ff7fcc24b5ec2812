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
held just before, and what torch's own read of it (AutotuneCache.read_best, spied too)
made of it: nothing stored, a result for another config list, no cache at all (a kernel
with one config at compile time gets none, so torch tunes it at every start), or one of
two results torch itself throws away, whichever config won (timing noise decides, so
more often under load):
- a register-spill RBLOCK config torch added at launch (`_dynamic_scale_rblock`): its
  loader matches a stored result only against the kernel's starting configs, so it
  declines it (torch 2.5-2.12; pytorch#181789 made 2.13 rebuild it);
- a coordinate-descent result that is one of the kernel's compiled configs: on an
  FX-graph hit torch loads it but drops its `found_by_coordesc` mark (or ignores it for
  a one-config kernel), and tunes it again (torch up to 2.11, pytorch#172819; fixed in
  2.12 by #173391).
The seconds each kernel's tuning took are recorded too: what the re-tuning cost the
warm start (layers/autotune.py weighs them).

Each spy is feature-detected: a torch without the method has that kind unobserved, and
the record says so; layers/tuning.py reads the record. Runs in the child; torch imported
lazily; no pytest.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import json
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import time

from pytest_compilecache.terms import (CACHE_OFF, IGNORED, LOST_MARK, NO_CACHE,
                                       NOT_RELOADED, NOT_STORED, OTHER_LIST, SCALED_DECLINED)


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


# torch's own read of a stored result: what it returned, for the kernel's key
READ_SPIES = [("torch._inductor.runtime.autotune_cache", "AutotuneCache", "read_best")]


class TuningSpy:
    """The autotune layer's observer (layers/autotune.py names it): start() before the
    workload, stop() after; record() is JSON, the layer's section of the record."""

    def __init__(self) -> None:
        self.seen: Dict[str, List[str]] = {k: [] for k in SPIES}  # kind -> kernels or ops
        self.why: Dict[str, str] = {}  # kernel -> what its stored tuning result was
        self.watched: Dict[str, str] = {}  # kind -> the method wrapped
        self.unwatched: Dict[str, str] = {}  # kind -> why not
        self.seconds: Dict[str, float] = {}  # kernel or op -> seconds its tuning took
        self.reads: Dict[str, str] = {}  # stored result's path -> torch's read (READ_*)
        self._undo: List[Callable[[], None]] = []
        self._started = 0.0
        self._stopped = 0.0

    def start(self) -> None:
        self._started = time.perf_counter()
        for module, cls_name, method in READ_SPIES:
            target = _find(module, cls_name, method)
            if target is not None:
                self._wrap_read(target[0], method, target[1])
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
                    with self._timed(name):
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
                        why.setdefault(name, stored_result(this, self.reads))
                except Exception:
                    name = "?"
                seen.append(name)
                with self._timed(name):
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
                why.setdefault(_kernel_name(this, args, kwargs),
                               stored_result(this, self.reads, coordesc=True))
            except Exception:
                pass
            return original(this, *args, **kwargs)

        setattr(cls, method, wrapper)
        self._undo.append(lambda: setattr(cls, method, raw))

    def _wrap_read(self, cls: Any, method: str, raw: Any) -> None:
        """What torch's read of each stored result returned (READ_*), keyed by the
        result's path: a tuned kernel's record says whether torch itself declined it."""
        original = getattr(cls, method)
        reads = self.reads

        @functools.wraps(original)
        def wrapper(this: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(this, *args, **kwargs)
            try:
                configs = args[1] if len(args) > 1 else kwargs.get("configs")
                key = _result_path(this)
                if key is not None:
                    reads[key] = read_outcome(this, result, configs)
            except Exception:
                pass
            return result

        setattr(cls, method, wrapper)
        self._undo.append(lambda: setattr(cls, method, raw))

    @contextlib.contextmanager
    def _timed(self, name: str) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            took = time.perf_counter() - began
            self.seconds[name] = self.seconds.get(name, 0.0) + took

    def stop(self) -> None:
        self._stopped = time.perf_counter()
        for undo in reversed(self._undo):
            try:
                undo()
            except Exception:
                pass
        self._undo.clear()

    def record(self, trace: Any = None) -> Dict[str, Any]:
        watched_s = max(0.0, (self._stopped or time.perf_counter()) - self._started)
        return {"seen": {k: list(v) for k, v in self.seen.items()}, "why": dict(self.why),
                "watched": dict(self.watched), "unwatched": dict(self.unwatched),
                "seconds": {k: round(v, 4) for k, v in self.seconds.items()},
                "workload_s": round(watched_s, 3) if self._started else None}


# torch's read of a stored result (TuningSpy.reads): it returned a config; it declined a
# result for the kernel's configs that names one of them, or one outside them
READ_LOADED, READ_DECLINED, READ_DECLINED_OFF = "loaded", "declined", "declined off-list"


def stored_result(tuner: Any, reads: Optional[Dict[str, str]] = None,
                  coordesc: bool = False) -> str:
    """Why a CachingAutotuner tunes a kernel: what its `.best_config` holds, read
    before the tuning overwrites it, and what torch's own read of it made of it
    (`reads`, by the result's key). '' where this torch's autotune cache cannot be read
    this way (local cache off, another layout)."""
    hook = getattr(tuner, "save_cache_hook", False)
    if hook is None:
        return _no_cache(getattr(tuner, "inductor_meta", None) or {})
    cache = getattr(hook, "__self__", None)
    key = _result_path(cache)
    if key is None:
        return ""
    data = _stored(cache)
    if isinstance(data, str):
        return data
    if data.get("configs_hash") != getattr(cache, "configs_hash", None):
        return OTHER_LIST
    thrown = _thrown_away(data, (reads or {}).get(key), coordesc)
    configs = getattr(tuner, "configs", None) or []
    listed = any(_names(cfg, data) for cfg in configs)
    return thrown or (IGNORED if listed else NOT_RELOADED)


def _no_cache(meta: Dict[str, Any]) -> str:
    """A kernel without an autotune cache: switched off, or one config at compile."""
    if meta.get("force_disable_caches") or meta.get("autotune_local_cache") is False:
        return CACHE_OFF
    return NO_CACHE


def _thrown_away(data: Dict[str, Any], read: Optional[str], coordesc: bool) -> str:
    """A stored result torch itself threw away (child docstring), by its read of it."""
    by_coordesc = bool(data.get("found_by_coordesc"))
    if read == READ_DECLINED_OFF and not by_coordesc:
        return SCALED_DECLINED
    if coordesc and read == READ_LOADED and by_coordesc:
        return LOST_MARK
    return ""


def read_outcome(cache: Any, result: Any, configs: Any) -> str:
    """What torch's read of a stored result (AutotuneCache.read_best) made of it."""
    if result is not None:
        return READ_LOADED
    data = _stored(cache)
    if isinstance(data, str) or data.get("configs_hash") != cache.configs_hash:
        return ""
    listed = any(_names(cfg, data) for cfg in configs or [])
    return READ_DECLINED if listed else READ_DECLINED_OFF


def _result_path(cache: Any) -> Optional[str]:
    local = getattr(cache, "local_cache", None)
    if isinstance(local, tuple) and len(local) == 2 and isinstance(local[1], str):
        return local[1]
    return None


def _stored(cache: Any) -> Any:
    """The stored result (a dict), else why there is none (NOT_STORED, unreadable):
    through torch's own local cache where it has one, else the file its key names."""
    store, key = cache.local_cache
    try:
        data = store.get(key) if hasattr(store, "get") else _read_file(key)
    except FileNotFoundError:
        return NOT_STORED
    except (OSError, ValueError, TypeError):
        return "its stored result cannot be read"
    if data is None:
        return NOT_STORED
    return data if isinstance(data, dict) else "its stored result cannot be read"


def _read_file(path: str) -> Any:
    with open(path) as f:
        return json.load(f)


def _names(cfg: Any, data: Dict[str, Any]) -> bool:
    """Whether a stored result names this config (torch's own matching)."""
    kw = getattr(cfg, "kwargs", {}) or {}
    return (all(data.get(k) == v for k, v in kw.items())
            and getattr(cfg, "num_warps", None) == data.get("num_warps")
            and getattr(cfg, "num_stages", None) == data.get("num_stages"))


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
