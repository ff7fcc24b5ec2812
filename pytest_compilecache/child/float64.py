"""A float64 run of the eager reference, for the accuracy rule in `compare`.

A ModelCase's model and inputs are cast to float64; a test body (which builds its
own model) runs under `make_mode()`, a TorchFunctionMode that computes every floating
op in float64. Either can fail (an op or custom kernel without float64):
then the caller says which rule it fell back to. Runs in the child; no pytest.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

# Calls that read metadata or identity: computing them on a float64 copy would be
# wasted work at best (and a new data_ptr at worst).
_PASS_THROUGH = frozenset((
    "__get__", "__set__", "__delete__", "data_ptr", "untyped_storage", "storage",
    "storage_offset", "size", "dim", "numel", "stride", "element_size", "is_contiguous",
    "is_floating_point", "is_complex", "get_device", "__len__", "__hash__",
    "register_hook", "retain_grad", "requires_grad_", "_is_view",
))
_TO_DOUBLE = frozenset(("float", "half", "bfloat16", "double"))


def _mode_base() -> Any:
    from torch.overrides import TorchFunctionMode

    return TorchFunctionMode


def _low(t: Any) -> bool:
    import torch

    return isinstance(t, torch.Tensor) and t.dtype in (torch.float32, torch.float16,
                                                       torch.bfloat16)


def up(value: Any) -> Any:
    """float32/float16/bfloat16 tensors (nested) as float64; anything else as is."""
    import torch
    from torch.utils._pytree import tree_map

    return tree_map(lambda t: t.to(torch.float64) if _low(t) else t, value)


def _in_place(name: str) -> bool:
    return (name.endswith("_") and not name.endswith("__")) or name.startswith("__i") \
        or name == "__setitem__"


def make_mode() -> Any:
    """A TorchFunctionMode that runs every floating op in float64. In-place ops run as
    called, into their target (a KV cache, running stats, an init, a parameter update)
    in the target's dtype; casts to a lower float type (`.float()`, `.to(torch.float32)`)
    stay float64; random factories are left alone, so the draws are eager's."""
    import torch

    low = (torch.float32, torch.float16, torch.bfloat16)

    class Float64Mode(_mode_base()):  # type: ignore[misc]
        def __torch_function__(self, func: Callable[..., Any], types: Any,
                               args: Tuple[Any, ...] = (), kwargs: Optional[Dict[str, Any]] = None
                               ) -> Any:
            kwargs = dict(kwargs or {})
            name = getattr(func, "__name__", "")
            if name in _PASS_THROUGH or _in_place(name):
                # an in-place call writes into its target, which may come positionally
                # or by keyword (nn.init.kaiming_uniform_(tensor=...)): never a copy
                return func(*args, **kwargs)
            if name in _TO_DOUBLE and args and isinstance(args[0], torch.Tensor) \
                    and args[0].is_floating_point():
                return args[0].to(torch.float64)
            if name in ("to", "type"):
                args = tuple(torch.float64 if isinstance(a, torch.dtype) and a in low else a
                             for a in args)
                if isinstance(kwargs.get("dtype"), torch.dtype) and kwargs["dtype"] in low:
                    kwargs["dtype"] = torch.float64
            args = tuple(up(list(args)))
            out = kwargs.pop("out", None)
            kwargs = up(kwargs)
            if out is not None:
                kwargs["out"] = out
            return func(*args, **kwargs)

    return Float64Mode()


@contextlib.contextmanager
def model_in_float64(model: Any) -> Iterator[None]:
    """A ModelCase's model cast to float64 in place (this is the last run of it in the
    phase), with every op in float64 too (casts inside forward stay float64)."""
    model.double()
    with make_mode():
        yield
