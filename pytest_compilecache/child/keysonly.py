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
So the stop replaces `fx_codegen_and_compile` with a graph that runs the FX graph, and
makes both saves no-ops (nothing of a stopped compile may be stored). A training forward
whose layout Inductor optimizes (channels-last convolutions) goes as far as lowering:
the backward's key holds the strides lowering gives the forward's saved activations,
which `codegen_and_compile` reads into its local `output_strides` right after
`graph.run` and hands AOTAutograd through the tracing context in `post_compile`
(`set_tracing_context_output_strides`). So for those forwards the stop comes at
`GraphLowering.compile_to_module` (the code generation that follows), takes
`output_strides` from the frame that called it, and its stand-in's `post_compile` hands
them on as a CompiledFxGraph's does. A torch without these names (before `load_with_key`
existed) cannot stop there: `start` says why and the phase compiles in full; one without
the lowering stop's names compiles those forwards in full.

Runs in the child; torch imported lazily; no pytest.
"""
from __future__ import annotations

import sys
from types import FrameType
from typing import Any, Callable, List, Optional, Sequence


class _FxGraphRun:
    """What Inductor would have returned for a graph (an OutputCode), running the FX
    graph it was handed: boxed call, no kernels."""

    def __init__(self, gm: Any, output_strides: Optional[List[Any]] = None) -> None:
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
        # lowering's strides of the outputs, where a forward went as far as lowering
        self.output_strides = output_strides

    def __call__(self, inputs: List[Any]) -> Any:
        if self._inner_boxed:
            return self._gm(inputs)
        args = list(inputs)
        inputs.clear()  # the boxed convention: the callee owns the list
        return self._gm(*args)

    def post_compile(self, example_inputs: Any = None, *args: Any, **kwargs: Any) -> None:
        if self.output_strides is not None:  # as CompiledFxGraph.post_compile does
            from torch._inductor.utils import set_tracing_context_output_strides

            set_tracing_context_output_strides(example_inputs, self)  # type: ignore[arg-type]

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


class _Lowered(BaseException):
    """Raised at the code generation of a forward that was only to be lowered, carrying
    lowering's output strides up to the stop. A BaseException: torch's own handlers
    between (`except Exception`) must not turn it into a compile error."""

    def __init__(self, output_strides: List[Any]) -> None:
        super().__init__("lowered")
        self.output_strides = output_strides


def _lowering_output_strides(graph: Any) -> Optional[List[Any]]:
    """The `output_strides` that `codegen_and_compile` computed for `graph` right after
    lowering it, read from its frame (the caller of code generation); None where no
    such frame is found (another graph's code generation, or torch laid out otherwise)."""
    frame: Optional[FrameType] = sys._getframe(2)
    for _ in range(8):  # codegen_and_compile is its caller (2.13), or one more up (2.5)
        if frame is None:
            break
        local = frame.f_locals
        if local.get("graph") is graph and isinstance(local.get("output_strides"), list):
            return list(local["output_strides"])
        frame = frame.f_back
    return None


def _copy_graph_module(gm: Any) -> Any:
    """A copy of `gm` to run: Inductor's post-grad passes rewrite the graph they lower in
    place, into ops meant for its code generation."""
    import copy

    import torch.fx

    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    graph._codegen = copy.deepcopy(gm.graph._codegen)
    copied = torch.fx.GraphModule(gm, graph)
    for name, child in list(copied.named_children()):  # subgraphs (cond, ...) alike
        if isinstance(child, torch.fx.GraphModule):
            setattr(copied, name, _copy_graph_module(child))
    return copied


class KeysOnly:
    """start() before the workload, stop() after; `graphs` counts the graphs stopped."""

    def __init__(self) -> None:
        self.graphs = 0
        self.lowered = 0  # forwards lowered, then stopped: their layout is in the backward's key
        self.full = 0  # such forwards compiled in full (no lowering stop in this torch)
        self.why_not: Optional[str] = None  # set by start() where torch cannot stop there
        self._lowering = False  # a forward is being compiled to be stopped after lowering
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
        lowering_stops = self._lowering_stop()

        def stopped(gm: Any, example_inputs: Sequence[Any], *args: Any, **kwargs: Any) -> Any:
            if not _layout_decides_backward(gm, kwargs):
                self.graphs += 1
                return _FxGraphRun(gm)
            run = None
            if lowering_stops:
                try:
                    run = _copy_graph_module(gm)
                except Exception:  # cannot copy what it would run: compile it in full
                    pass
            if run is not None:
                self._lowering = True  # only this graph's code generation stops
                try:
                    compiled = full(gm, example_inputs, *args, **kwargs)
                except _Lowered as lowered:
                    self.lowered += 1
                    return _FxGraphRun(run, lowered.output_strides)
                finally:
                    self._lowering = False
            else:
                compiled = full(gm, example_inputs, *args, **kwargs)
            self.full += 1  # lowering's strides were not found: it compiled in full
            return compiled

        try:
            self._swap(cfx, "fx_codegen_and_compile", stopped)
            self._swap(FxGraphCache, "_save_graph", staticmethod(lambda *a, **k: None))
            self._swap(AOTAutogradCache, "save", staticmethod(lambda *a, **k: None))
        except Exception as e:  # laid out otherwise in this torch: compile in full
            self.stop()
            self.why_not = f"torch's compile entry points are laid out otherwise ({e!r})"
            return False
        return True

    def _lowering_stop(self) -> bool:
        """Stop a lowered graph at its code generation where its output strides are known;
        False where this torch has not the names it takes (those forwards compile in full)."""
        try:
            import torch._inductor.utils as utils
            from torch._inductor.graph import GraphLowering
        except Exception:
            return False
        if not (hasattr(GraphLowering, "compile_to_module")
                and hasattr(utils, "set_tracing_context_output_strides")):
            return False
        codegen = GraphLowering.compile_to_module

        def lowered_only(graph: Any, *args: Any, **kwargs: Any) -> Any:
            strides = _lowering_output_strides(graph) if self._lowering else None
            if strides is None:
                return codegen(graph, *args, **kwargs)
            raise _Lowered(strides)

        try:
            self._swap(GraphLowering, "compile_to_module", lowered_only)
        except Exception:
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
