"""Keys without kernels (--compile-cache-keys-only): the phase runs Dynamo and
AOTAutograd as a cold compile does, and Inductor as far as its FX-graph cache key, then
stops before code generation, C++/Triton compilation and autotuning; the graph then
runs as the FX graph AOTAutograd handed Inductor (eagerly). Every lookup is still
logged with its key and components, as a cold run's miss (the cache dirs are empty),
so the key manifest is the cold run's, graph for graph.

Where torch computes each key (torch 2.13, torch/_inductor/compile_fx.py
`_compile_fx_inner`): `FxGraphCache.prepare_key` then `load_with_key`, and only on a
miss `fx_codegen_and_compile` (Inductor's lowering, code generation and compiles), then
`FxGraphCache._save_graph`, then the `fx_graph_cache_miss` trace event with the key and
its components; AOTAutograd's key (`AOTAutogradCache.try_load`) is computed and logged
before it traces the joint graph, and its entry saved after (`AOTAutogradCache.save`).
So the stop replaces `fx_codegen_and_compile` with a graph that runs the FX graph (a
training forward whose layout Inductor optimizes still compiles in full: the backward's
key holds the strides it gives its saved activations), and makes both saves no-ops
(nothing of a stopped compile may be stored). A torch without
these names (before `load_with_key` existed) cannot stop there: `start` says why and
the phase compiles in full.

Runs in the child; torch imported lazily; no pytest.
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence


class _FxGraphRun:
    """What Inductor would have returned for a graph (an OutputCode), running the FX
    graph it was handed: boxed call, no kernels."""

    def __init__(self, gm: Any) -> None:
        import torch.fx

        # on the instance: a wrapper torch puts around the backward (functools.wraps)
        # copies the instance's attributes, not the class's
        self._boxed_call = True
        self._gm = gm
        codegen = getattr(getattr(gm, "graph", None), "_codegen", None)
        boxed = getattr(torch.fx.graph, "_BoxedCodeGen", None)
        self._inner_boxed = boxed is not None and isinstance(codegen, boxed)
        self._fx_graph_cache_key: Optional[str] = None
        self._fx_graph_cache_debug_lines: Optional[List[str]] = None
        self._time_taken_ns: Optional[int] = None

    def __call__(self, inputs: List[Any]) -> Any:
        if self._inner_boxed:
            return self._gm(inputs)
        args = list(inputs)
        inputs.clear()  # the boxed convention: the callee owns the list
        return self._gm(*args)

    def post_compile(self, *args: Any, **kwargs: Any) -> None:
        return None

    def set_triton_bundle(self, bundle: Any) -> None:
        return None

    def prepare_for_serialization(self) -> None:
        raise RuntimeError("a keys-only graph is never saved")


def _layout_decides_backward(gm: Any, kwargs: Any) -> bool:
    """A training forward whose saved activations Inductor lays out otherwise than eager
    (layout optimization: channels-last for convolutions on a GPU). The backward's
    FX-graph key holds its inputs' strides, which come from the compiled forward's
    outputs, so that forward must really compile for the backward's key to be a cold
    run's (measured: resnet18 training on an H100, torch 2.11, the backward's key
    differed when its forward was stopped)."""
    if kwargs.get("is_backward") or kwargs.get("is_inference"):
        return False
    try:
        from torch._inductor.graph import GraphLowering

        return bool(GraphLowering.decide_layout_opt(gm, is_inference=False))
    except Exception:  # cannot tell: compile it, the keys stay a cold run's
        return True


class KeysOnly:
    """start() before the workload, stop() after; `graphs` counts the graphs stopped."""

    def __init__(self) -> None:
        self.graphs = 0
        self.full = 0  # forwards compiled in full: their layout is in the backward's key
        self.why_not: Optional[str] = None  # set by start() where torch cannot stop there
        self._undo: List[Callable[[], None]] = []

    def start(self) -> bool:
        try:
            import torch._inductor.compile_fx as cfx
            from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache
            from torch._inductor.codecache import FxGraphCache
        except Exception as e:
            self.why_not = f"torch's compile modules did not import ({type(e).__name__}: {e})"
            return False
        missing = [name for obj, name in ((cfx, "fx_codegen_and_compile"),
                                          (cfx, "_compile_fx_inner"),
                                          (FxGraphCache, "load_with_key"),
                                          (FxGraphCache, "_save_graph"),
                                          (AOTAutogradCache, "save"))
                   if not hasattr(obj, name)]
        if missing:
            import torch

            self.why_not = (f"torch {torch.__version__} has no {', '.join(missing)}: its "
                            f"FX-graph key is not computed before code generation there")
            return False

        full = cfx.fx_codegen_and_compile

        def stopped(gm: Any, example_inputs: Sequence[Any], *args: Any, **kwargs: Any) -> Any:
            if _layout_decides_backward(gm, kwargs):
                self.full += 1
                return full(gm, example_inputs, *args, **kwargs)
            self.graphs += 1
            return _FxGraphRun(gm)

        try:
            self._swap(cfx, "fx_codegen_and_compile", stopped)
            self._swap(FxGraphCache, "_save_graph", staticmethod(lambda *a, **k: None))
            self._swap(AOTAutogradCache, "save", staticmethod(lambda *a, **k: None))
        except Exception as e:  # laid out otherwise in this torch: compile in full
            self.stop()
            self.why_not = f"torch's compile entry points are laid out otherwise ({e!r})"
            return False
        return True

    def _swap(self, owner: Any, name: str, new: Any) -> None:
        import inspect

        old = inspect.getattr_static(owner, name)  # as defined: a staticmethod stays one
        setattr(owner, name, new)
        self._undo.append(lambda: setattr(owner, name, old))

    def stop(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()
