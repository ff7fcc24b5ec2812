"""A float64 run of the eager reference, for the accuracy rule in `compare`.

A ModelCase's model and inputs are cast to float64; a test body (which builds its
own model) runs under `make_mode()`, a TorchFunctionMode that computes every floating
op in float64. Either can fail (an op or custom kernel without float64):
then the caller says which rule it fell back to. Runs in the child; no pytest.

Mixed-precision training bodies run too, as PyTorch's own accuracy benchmark runs its
float64 reference (`benchmarks/dynamo/common.py`: the float64 model under the same
autocast): autocast casts no float64 tensor (`at::autocast::is_eligible` skips
double), so its regions compute in float64; the state that optimizers and GradScaler
keep stays in the dtype it was made in (see `make_mode`).
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

# Calls that read metadata or identity: computing them on a float64 copy would be
# wasted work at best (and a new data_ptr at worst).
_PASS_THROUGH = frozenset((
    "__get__", "__set__", "__delete__", "data_ptr", "untyped_storage", "storage",
    "storage_offset", "size", "dim", "numel", "stride", "element_size", "is_contiguous",
    "is_floating_point", "is_complex", "get_device", "__len__", "__hash__",
    "register_hook", "retain_grad", "requires_grad_", "_is_view",
))
_TO_DOUBLE = frozenset(("float", "half", "bfloat16", "double"))
# Ops whose scalar tensors are float32 by contract: GradScaler's `_amp_*` kernels
# (inv_scale, found_inf: "inv_scale must be a float tensor") and the fused optimizers
# (`_fused_adam_`/`_fused_adamw_`/`_fused_sgd_` read grad_scale and found_inf as float).
# Under the mode those scalars come out float64 (`scale.double().reciprocal().float()`,
# `found_inf.to(device)`), so they get float32 back; everything else they take is
# written in place or read in its own dtype.
_FLOAT32_SCALARS = ("_amp_", "_fused_")


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


def _like(name: str) -> bool:
    """A factory shaped after a tensor (`torch.zeros_like(p)`, `p.new_zeros(n)`): it
    keeps that tensor's dtype, as without the mode. Optimizer state is made this way
    (Adam's exp_avg, fused SGD's momentum buffer) and is then updated by ops that
    require it to match the parameter's dtype (`exp_avg.lerp_(grad)`, the foreach and
    fused kernels); random ones (`randn_like`) draw eager's numbers."""
    return name.endswith("_like") or name.startswith("new_")


def _with_float32_scalars(func: Callable[..., Any], args: Tuple[Any, ...],
                          kwargs: Dict[str, Any]) -> Any:
    """`func` with its float64 tensors of at most one element as float32
    (`_FLOAT32_SCALARS`), and what it wrote into them written back: GradScaler's
    found_inf is such a scalar (the mode made its per-device copy float64), and the
    overflow check writes into it."""
    import torch
    from torch.utils._pytree import tree_map

    cast: List[Tuple[Any, Any]] = []

    def down(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and t.dtype == torch.float64 and t.numel() <= 1:
            cast.append((t, t.float()))
            return cast[-1][1]
        return t

    result = func(*tree_map(down, list(args)), **tree_map(down, kwargs))
    for original, copy in cast:
        if not torch.equal(original.float(), copy):
            original.copy_(copy)
    return result


def _into_target(args: Tuple[Any, ...], kwargs: Dict[str, Any]
                 ) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
    """An in-place op's float64 operands in its target's dtype where that is a lower
    float type (for a foreach op, each list operand in the dtype of the target at its
    index). What the op writes is rounded to that dtype anyway, and in-place ops may
    require operands of their target's dtype: Adam's single-tensor weight decay makes
    `grad` float64 here (`grad.add(param)`), then `exp_avg.lerp_(grad)` needs it float32."""
    import torch
    from torch.utils._pytree import tree_map

    target = args[0] if args else None
    if isinstance(target, torch.Tensor):
        dtypes = [target.dtype]
    elif (isinstance(target, (list, tuple)) and target
            and all(isinstance(t, torch.Tensor) for t in target)):
        dtypes = [t.dtype for t in target]
    else:  # the target by keyword (nn.init's tensor=) or no tensor at all: as called
        return args, kwargs

    foreach = not isinstance(target, torch.Tensor)

    def cast(value: Any, dtype: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.dtype == torch.float64 and dtype in (
                torch.float32, torch.float16, torch.bfloat16):
            return value.to(dtype)
        return value

    def operand(value: Any) -> Any:
        if foreach and isinstance(value, (list, tuple)) and len(value) == len(dtypes):
            return type(value)(cast(v, d) for v, d in zip(value, dtypes))
        return tree_map(lambda v: cast(v, dtypes[0]), value)

    return ((target, *map(operand, args[1:])),
            {k: operand(v) for k, v in kwargs.items()})


def _in_place(name: str) -> bool:
    return ((name.endswith("_") and not name.endswith("__")) or name.startswith("__i")
            or name == "__setitem__")


def _follow(found_inf: Optional[Sequence[float]]) -> Callable[[Any, Any, Any], Any]:
    """GradScaler's overflow check as the eager run it stands beside saw it: the i-th
    check's found_inf at least that run's i-th (`amp.Seen.found_inf`), so the float64 run
    skips the steps a float16 overflow made eager skip, and trains the same model."""
    import torch

    check = torch._C._VariableFunctions._amp_foreach_non_finite_check_and_unscale_
    seen = iter(found_inf or ())

    def checked(grads: Any, found: Any, inv_scale: Any) -> Any:
        result = check(grads, found, inv_scale)
        eager = next(seen, 0.0)
        if eager > 0:
            found.fill_(max(float(found), eager))
        return result

    return checked


def make_mode(found_inf: Optional[Sequence[float]] = None) -> Any:
    """A TorchFunctionMode that runs every floating op in float64. In-place ops run
    into their target (a KV cache, running stats, an init, a parameter update) in the
    target's dtype, their float64 operands in that dtype (`_into_target`); casts to a
    lower float type (`.float()`, `.to(torch.float32)`) stay float64; random factories
    are left alone, so the draws are eager's.

    So that AMP training steps run, each dtype contract of torch.amp and torch.optim
    holds: factories shaped after a tensor keep its dtype (`_like`), and GradScaler's
    and the fused optimizers' scalars are float32 (`_FLOAT32_SCALARS`). Parameters and
    optimizer state then stay in their own dtype (float32 under autocast), updated in
    place from float64 math: the run is float64 up to one rounding of that state per
    step, far below a half-precision run's error.

    `found_inf`: the eager run's GradScaler overflow checks (`amp.Seen.found_inf`), for
    the float64 run to skip the same steps (`_follow`)."""
    import torch

    low = (torch.float32, torch.float16, torch.bfloat16)
    follow = _follow(found_inf)

    class Float64Mode(_mode_base()):  # type: ignore[misc]
        def __torch_function__(self, func: Callable[..., Any], types: Any,
                               args: Tuple[Any, ...] = (), kwargs: Optional[Dict[str, Any]] = None
                               ) -> Any:
            kwargs = dict(kwargs or {})
            name = getattr(func, "__name__", "")
            if name.startswith(_FLOAT32_SCALARS):
                if name == "_amp_foreach_non_finite_check_and_unscale_":
                    func = follow
                return _with_float32_scalars(func, args, kwargs)
            if _in_place(name):
                # an in-place call writes into its target, which may come positionally
                # or by keyword (nn.init.kaiming_uniform_(tensor=...)): never a copy
                args, kwargs = _into_target(args, kwargs)
                return func(*args, **kwargs)
            if name in _PASS_THROUGH or _like(name):
                return func(*args, **kwargs)
            if (name in _TO_DOUBLE and args and isinstance(args[0], torch.Tensor)
                    and args[0].is_floating_point()):
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
