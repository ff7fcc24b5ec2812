"""Where the phase child sees a compiled call: at the one place every compiled callable
is made, Dynamo's context `_TorchDynamoContext.__call__(fn)`. `torch.compile` (of a
function, of a module: its `OptimizedModule.forward` is made there too),
`nn.Module.compile()`, `torch._dynamo.optimize(...)(fn)` and an `OptimizedModule`'s
`dynamo_ctx(fn)` applied to another function (Lightning's `from_compiled` wraps
`training_step` so) all pass through it; patching `torch.compile` alone saw only the
first two. What it returns is wrapped so that each call's entry and outputs reach the
`Recorder`; the wrapper carries torch's own attributes (`_torchdynamo_inline`,
`_torchdynamo_orig_callable`, `aot_compile`), so Dynamo, inlining it inside another
compiled region or compiling it again, sees the user's function, never the wrapper.

Runs in the child (imports torch lazily); no pytest import.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

from pytest_compilecache.child.frames import in_torch
from pytest_compilecache.child.workload import Recorder

# Module methods that stand for the module itself: a call of one is a call of the module
MODULE_CALLS = ("__call__", "_call_impl", "_wrapped_call_impl", "forward")


def observe_compiled_calls(recorder: Recorder) -> Callable[[], None]:
    """Record the outputs of every compiled callable made from now on; returns the undo.
    A `torch._dynamo.disable` context (older torch makes it here too) is left alone."""
    from torch._dynamo import eval_frame as ef

    base = ef._TorchDynamoContext
    original = base.__dict__["__call__"]
    disable = getattr(ef, "DisableContext", ())

    def call(self: Any, fn: Any) -> Any:
        made = original(self, fn)
        if isinstance(self, disable) or not _is_function(made):
            return made  # a module (its forward came through here) or a class
        return recording(recorder, made, label(fn))

    base.__call__ = call  # type: ignore[method-assign]
    return lambda: setattr(base, "__call__", original)


def _is_function(obj: Any) -> bool:
    import inspect

    import torch

    return callable(obj) and not inspect.isclass(obj) and not isinstance(obj, torch.nn.Module)


def recording(recorder: Recorder, compiled: Callable[..., Any], name: str) -> Callable[..., Any]:
    """`compiled`, its entry and outputs told to `recorder`; what it computes unchanged."""
    @functools.wraps(compiled)
    def call(*a: Any, **kw: Any) -> Any:
        recorder.enter(a)
        try:
            out = compiled(*a, **kw)
        except BaseException:
            recorder.leave(name, None, record=False)
            raise
        return recorder.leave(name, out)

    if hasattr(compiled, "_torchdynamo_wrapper_id"):
        # torch unwraps a wrapper (innermost_fn) only where this id is its own: compiled
        # again or disabled, the wrapper leads to the user's function as torch's did
        call._torchdynamo_wrapper_id = id(call)  # type: ignore[attr-defined]
    return call


def label(obj: Any) -> str:
    """The name a compiled call's outputs go under: a module's class name (compiled
    whole, by `module.compile()`, or through torch's `wrap_inline`), else the function's
    qualified name (`LitModel.training_step`)."""
    import torch

    code = getattr(obj, "__code__", None)
    if code is not None and in_torch(code.co_filename) and hasattr(obj, "__wrapped__"):
        obj = obj.__wrapped__  # torch's wrap_inline(fn): an extra frame around fn
    owner = getattr(obj, "__self__", None)
    if isinstance(owner, torch.nn.Module) and getattr(obj, "__name__", "") in MODULE_CALLS:
        return type(owner).__name__
    if hasattr(obj, "__qualname__"):
        return str(obj.__qualname__)
    return type(obj).__name__
