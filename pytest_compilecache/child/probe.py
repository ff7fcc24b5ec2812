"""In-process observation of torch.compile's cache layers (runs in the child).

What every layer reads, through stable hooks only, each feature-detected so torch
2.5-2.15 all work: counters (`torch._dynamo.utils.counters`), the structured-trace logger
`torch.__trace` (cache keys, components, bypass reasons, PGO reads/writes), Dynamo's
frame compiles and resets; and each layer's own observer where the layer names one
(`CacheLayer.observer`: the kernels layer's Triton listener, the autotune layer's tuning
spy), whose record is that layer's section. torch replays the cold compile's inductor
counters on an FX-graph cache hit, so no counter that a compile increments says what
the warm process did. No pytest import.
"""
from __future__ import annotations

import importlib
import logging
import os
import time
from collections import defaultdict
from typing import Any, Callable, Dict, List, Optional

from pytest_compilecache.child.frames import (in_torch, user_function,
                                              closure_hash_inputs, reset_caller)
from pytest_compilecache.child.settings import SwitchWatch
from pytest_compilecache.child.tracelog import (AOT_LOGGER, DYNAMO_LOGGER, TRACE_LOGGER,
                                                AotDebugHandler, LimitHandler, SkipFilter,
                                                TraceHandler, parse_components)

COUNTER_GROUPS = ("aot_autograd", "inductor", "dynamo_cache", "stats", "frames")


def layer_config(origins: Optional[Dict[str, str]] = None,
                 forced_while_compiling: Optional[str] = None) -> Dict[str, Any]:
    """Which layers this torch version has and its config enables, with why not: each
    layer's own rule (layers/), over torch's config modules read once here, and where
    each switch got its value (child/settings.py)."""
    import torch

    from pytest_compilecache.layers import REGISTRY
    from pytest_compilecache.layers.base import TorchConfigs

    ic = _try(lambda: __import__("torch._inductor.config", fromlist=["x"]))
    compiler = getattr(torch.compiler, "config", None)
    cfgs = TorchConfigs(
        version=torch.__version__, inductor=ic,
        functorch=_try(lambda: __import__("torch._functorch.config", fromlist=["x"])),
        dynamo=_try(lambda: __import__("torch._dynamo.config", fromlist=["x"])),
        job_id=current_job_id(),
        force_disabled=bool(getattr(ic, "force_disable_caches", False)
                            or getattr(compiler, "force_disable_caches", False)),
        forced_while_compiling=forced_while_compiling, origins=dict(origins or {}))
    out = {layer.name: layer.config(cfgs) for layer in REGISTRY}
    return {name: state for name, state in out.items() if state is not None}


def current_job_id() -> Optional[str]:
    """torch.compiler.config.job_id (2.6+: set in code, or from TORCH_COMPILE_JOB_ID /
    TORCH_COMPILE_STICKY_PGO_KEY), else the environment variable."""
    import torch

    from pytest_compilecache.isolation import job_id_from_env

    cfg = getattr(torch.compiler, "config", None)
    value = getattr(cfg, "job_id", None) if cfg is not None else None
    return value or job_id_from_env(os.environ)


def layer_observers() -> Dict[str, Any]:
    """Each registered layer's own observer, by its record section: the class its
    `observer` names ("module:Class"), imported here, in the phase child, only."""
    from pytest_compilecache.layers import REGISTRY

    out: Dict[str, Any] = {}
    for layer in REGISTRY:
        if not layer.observer:
            continue
        module, _, name = layer.observer.partition(":")
        try:
            out[layer.section_key] = getattr(importlib.import_module(module), name)()
        except Exception as e:
            raise RuntimeError(f"the {layer.name} layer's observer {layer.observer!r} could "
                               f"not be made: {type(e).__name__}: {e}") from e
    return out


def _try(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:
        return None


class CacheObserver:
    """start() before the workload, stop() after; `record()` is JSON-serialisable."""

    def __init__(self) -> None:
        self.events: List[Any] = []
        self.aot_debug: Dict[str, List[str]] = {}
        self.triton_compiles: List[Dict[str, Any]] = []
        self.limit_hits: List[Dict[str, Any]] = []
        # one per torch._dynamo.reset() in the workload: "" the test's own call (or
        # torch.compiler.reset()), else the torch function that called it (explain)
        self.resets: List[str] = []
        self.skipped: List[str] = []  # frames Dynamo skipped, with torch's reason
        self.code_ids: Dict[str, Any] = {}  # code -> its PGO CodeId's closure hash
        self.user_code: Dict[str, str] = {}  # torch's wrapper code -> the user's it calls
        self.hash_inputs: Dict[str, List[str]] = {}  # code -> what its closure hash hashes
        self.layers: Dict[str, Any] = {}  # record section -> a layer's own observer
        self._restore: List[Callable[[], None]] = []
        self._before: Dict[str, Dict[str, int]] = {}
        self._after: Dict[str, Dict[str, int]] = {}
        self.wall_s = 0.0
        self._t0 = 0.0
        self.stopped = False
        from pytest_compilecache.layers import REGISTRY

        self.switches = SwitchWatch(s for layer in REGISTRY for s in layer.switches)
        self.layer_config: Optional[Dict[str, Any]] = None  # as the workload left it

    def start(self) -> None:
        from torch._dynamo.utils import counters

        # the registry as the test's conftests left it: a layer they registered is observed
        from pytest_compilecache.layers import REGISTRY

        self.layers = layer_observers()
        self.switches = SwitchWatch(s for layer in REGISTRY for s in layer.switches)
        tl = logging.getLogger(TRACE_LOGGER)
        th = TraceHandler(self.events)
        old_trace = (tl.level, tl.propagate)
        tl.addHandler(th)
        tl.setLevel(logging.DEBUG)
        # torch emits its trace only to a logger with handlers, ours here, and never lets
        # it propagate (torch._logging: "trace_log never propagates"); left to propagate,
        # every event lands in pytest's log capture, and a failing phase's last lines of
        # output were 40 empty `DEBUG torch.__trace:utils.py:2350` records, not the test's
        tl.propagate = False

        def restore_trace() -> None:
            tl.removeHandler(th)
            tl.setLevel(old_trace[0])
            tl.propagate = old_trace[1]

        self._restore.append(restore_trace)
        al = logging.getLogger(AOT_LOGGER)
        ah = AotDebugHandler(self.aot_debug)
        old = (al.level, al.propagate)
        al.addHandler(ah)
        al.setLevel(logging.DEBUG)
        al.propagate = False  # compute the components, print nothing

        def restore_aot() -> None:
            al.removeHandler(ah)
            al.setLevel(old[0])
            al.propagate = old[1]

        self._restore.append(restore_aot)
        dl = logging.getLogger(DYNAMO_LOGGER)
        lh = LimitHandler(self.limit_hits)
        dl.addHandler(lh)  # its level and output stay the user's
        self._restore.append(lambda: dl.removeHandler(lh))
        self._hear_skips(dl)
        self._count_resets()
        self._record_code_ids()
        for observer in self.layers.values():
            self._restore.append(observer.stop)  # first: a start that fails halfway comes off too
            try:
                observer.start()
            except Exception:  # what was installed comes off again: the phase is an error
                self.stop()
                raise
        self.switches.start()
        self._restore.append(self.switches.stop)  # its compile watch, if stop() is not reached
        self._before = {g: dict(counters.get(g, {})) for g in COUNTER_GROUPS}
        self._t0 = time.perf_counter()

    def _hear_skips(self, dl: logging.Logger) -> None:
        """The frames Dynamo skipped and torch's reason (its DEBUG line `skipping: ...`),
        heard by a filter; what reaches the user's handlers stays what their level let
        through before: a check that compiled 0 frames says why."""
        level, before = dl.level, dl.getEffectiveLevel()
        skips = SkipFilter(self.skipped, before)
        # its child loggers (torch's `bytecode`, `graph_breaks` artifacts) would inherit
        # DEBUG, and no filter of this logger stops what they log: each keeps its level
        children = [c for name, c in logging.Logger.manager.loggerDict.items()
                    if name.startswith(DYNAMO_LOGGER + ".") and isinstance(c, logging.Logger)
                    and c.level == logging.NOTSET]
        for child in children:
            child.setLevel(before)
        dl.addFilter(skips)
        dl.setLevel(logging.DEBUG)

        def restore() -> None:
            dl.removeFilter(skips)
            dl.setLevel(level)
            for child in children:
                child.setLevel(logging.NOTSET)

        self._restore.append(restore)

    def _count_resets(self) -> None:
        """torch._dynamo.reset() (also what torch.compiler.reset() calls) drops compiled
        code: the compiles after it are no guard failure. Who called it: the test, or a
        torch function (torch._dynamo.explain resets before and after it traces)."""
        import sys

        import torch._dynamo

        original = torch._dynamo.reset
        counted = self.resets

        def reset(*args: Any, **kwargs: Any) -> Any:
            counted.append(reset_caller(sys._getframe(1)))
            return original(*args, **kwargs)

        torch._dynamo.reset = reset  # type: ignore[assignment]
        self._restore.append(lambda: setattr(torch._dynamo, "reset", original))

    def _record_code_ids(self) -> None:
        """The ids torch files a frame's profile under (torch._dynamo.pgo.CodeId): a
        closure's part is a hash that may differ per process, and then no saved profile
        applies, job id or not (torch 2.12+; absent before: nothing recorded)."""
        try:
            from torch._dynamo import pgo

            raw = pgo.CodeId.__dict__["make"]
            make = raw.__func__
        except Exception:
            return
        seen, users, inputs = self.code_ids, self.user_code, self.hash_inputs

        def recorded(code: Any, *args: Any, **kwargs: Any) -> Any:
            cid = make(code, *args, **kwargs)  # as torch called it (2.11 passes no closure)
            try:
                closure = args[0] if args else kwargs.get("closure")
                where = f"{code.co_name} ({os.path.basename(code.co_filename)}:{code.co_firstlineno})"
                h = getattr(cid, "closure_hash", None)
                if h is not None or where not in seen:  # torch also asks without closure
                    seen[where] = h
                if closure and h is not None:
                    inputs[where] = closure_hash_inputs(closure)
                if closure and in_torch(code.co_filename):
                    user = user_function(closure)
                    if user:
                        users[where] = user
            except Exception:
                pass
            return cid

        pgo.CodeId.make = staticmethod(recorded)  # type: ignore[method-assign]
        self._restore.append(lambda: setattr(pgo.CodeId, "make", raw))

    def stop(self) -> None:
        from torch._dynamo.utils import counters

        self.wall_s = time.perf_counter() - self._t0
        self.stopped = True
        self._after = {g: dict(counters.get(g, {})) for g in COUNTER_GROUPS}
        try:  # what the user's code left, before the eager re-runs and fixtures' teardown
            self.switches.stop()
            self.layer_config = layer_config(self.switches.origins(),
                                             self.switches.forced_while_compiling)
        except Exception:
            self.layer_config = None
        for undo in reversed(self._restore):
            try:
                undo()
            except Exception:
                pass
        self._restore.clear()

    def counters(self) -> Dict[str, Dict[str, int]]:
        out: Dict[str, Dict[str, int]] = {}
        for g in COUNTER_GROUPS:
            a, b = self._after.get(g, {}), self._before.get(g, {})
            d = {k: a[k] - b.get(k, 0) for k in a if a[k] != b.get(k, 0)}
            if d:
                out[g] = d
        return out

    def graphs(self) -> Dict[str, Dict[str, Any]]:
        graphs: Dict[str, Dict[str, Any]] = defaultdict(
            lambda: {"fx_graph": [], "aot_autograd": [], "pgo": {"read": 0, "written": 0}})
        for name, cid, data in self.events:
            if name.endswith("code_state"):
                graphs[cid]["pgo"]["read" if name.startswith("get_") else "written"] += 1
                continue
            if not name.startswith(("fx_graph_cache", "aotautograd_cache")):
                continue
            if not isinstance(data, dict):
                continue
            layer = "fx_graph" if name.startswith("fx_graph") else "aot_autograd"
            state = data.get("cache_state") or name.rsplit("_", 1)[-1]
            if state not in ("hit", "miss", "bypass"):
                state = "miss"
            key = data.get("key")
            comps = data.get("components") or (
                self.aot_debug.get(str(key), []) if layer == "aot_autograd" else [])
            parsed = parse_components(comps)
            backward = any(c[0] == "fx_kwargs[is_backward]" and c[2].strip() == "True"
                           for c in parsed)
            entry = {"key": key, "state": state, "backward": backward,
                     "bypass_reason": data.get("cache_bypass_reason"),
                     "detail": data.get("cache_status_detailed"),
                     "guard_expr": data.get("cache_status_guard_expr"),
                     "components": parsed}
            graphs[cid][layer].append(entry)
        return dict(graphs)

    def recompile_reasons(self) -> List[str]:
        """Why Dynamo recompiled a frame (guard failures), torch 2.5+'s trace artifact."""
        out: List[str] = []
        for name, _, data in self.events:
            if name == "recompile_reasons":
                out += [str(r) for r in (data if isinstance(data, list) else [data])]
        return out

    def frame_compiles(self) -> Dict[str, Any]:
        """Each Dynamo frame compile (its compile id, code object, recompile reason,
        failure) and each recompile limit reached: see recompiles.py."""
        out = [{"compile_id": cid, **data} for name, cid, data in self.events
               if name == "compilation_metrics"]
        callers: Dict[str, int] = defaultdict(int)
        for who in self.resets:
            if who:
                callers[who] += 1
        return {"compiles": out, "limit_hits": list(self.limit_hits),
                "resets": self.resets.count(""), "reset_callers": dict(callers),
                "skipped": list(self.skipped), "code_ids": dict(self.code_ids),
                "user_code": dict(self.user_code), "hash_inputs": dict(self.hash_inputs)}

    def record(self) -> Dict[str, Any]:
        sections = {name: obs.record(self.events) for name, obs in self.layers.items()}
        return {"wall_s": round(self.wall_s, 3), "counters": self.counters(),
                "graphs": self.graphs(), "recompile_reasons": self.recompile_reasons(),
                "dynamo": self.frame_compiles(),
                "layer_config": self.layer_config if self.layer_config is not None
                else layer_config(self.switches.origins()), **sections}
