"""Which autocast dtypes a run computed in, for the tolerance the comparisons give it.

An fp16 or bf16 autocast region computes in half precision even where its outputs are
float32 (a loss, logits under the CPU policy): eager's own error is a half type's, so
compiled vs eager must be held to that dtype's tolerance (`compare`, `work_dtype`),
as PyTorch's accuracy benchmark holds its AMP runs to a half type's multiplier. The
dtype is observed, never imposed: `watch()` notes each `torch.autocast.__enter__`
(after it ran, with what it returned) and, through `Seen.sample()`, the autocast
state in effect where it is asked; the user's code runs exactly as without it.

It also notes GradScaler's overflow checks (`Seen.found_inf`), for the float64 run to
follow: a float16 backward that overflows makes the scaler skip that step, which the
float64 run (no overflow there) would take, and compute another model from then on
(resnet18 on CPU skipped both of its first two steps).

Runs in the child; imports torch lazily; no pytest.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Iterator, List, Optional, Set, Tuple

# loosest first: bfloat16's 8-bit mantissa, then float16's 11 bits
_HALF = ("bfloat16", "float16")


class Seen:
    """The autocast regions a run entered: (device type, dtype name) of each enabled
    one, on `device` only when one is given (autocast("cuda") leaves CPU ops alone)."""

    def __init__(self, device: Optional[str] = None) -> None:
        self.device = device
        self.regions: Set[Tuple[str, str]] = set()
        # found_inf after each of GradScaler's `_amp_foreach_non_finite_check_and_unscale_`
        # calls, in order: > 0 where that check found an overflow (the step is skipped)
        self.found_inf: List[float] = []

    def note(self, device_type: Any, dtype: Any, enabled: Any) -> None:
        """An autocast region with these arguments was entered."""
        kind = str(device_type).split(":")[0]
        if enabled and dtype is not None and (self.device is None or kind == self.device):
            self.regions.add((kind, str(dtype).replace("torch.", "")))

    def sample(self) -> None:
        """Note the autocast state in effect now (`torch.is_autocast_enabled`): an
        autocast entered before the watch (a fixture's), or set without the context
        manager. Meant for each outermost compiled call's entry."""
        import torch

        for kind in ((self.device,) if self.device else ("cpu", "cuda")):
            try:
                if torch.is_autocast_enabled(kind):
                    self.note(kind, torch.get_autocast_dtype(kind), True)
            except (RuntimeError, TypeError, AttributeError):  # a device type torch lacks
                continue

    @property
    def dtype(self) -> Optional[Any]:
        """The half type the work ran in (the loosest, when both were seen), or None:
        no enabled fp16/bf16 autocast region."""
        import torch

        names = {dtype for _, dtype in self.regions}
        for name in _HALF:
            if name in names:
                return getattr(torch, name)
        return None


@contextlib.contextmanager
def watch(device: Optional[str] = None) -> Iterator[Seen]:
    """Note every autocast region entered inside the block (and the autocast state at
    its start), and every GradScaler overflow check's result. The patch wraps
    `torch.autocast.__enter__` for the block only: it calls the original and returns its
    result, so the user's code sees no difference (the deprecated
    `torch.cuda.amp.autocast`/`torch.cpu.amp.autocast` enter through it too), and
    `torch._amp_foreach_non_finite_check_and_unscale_` likewise. Only for
    eager runs: Dynamo traces autocast without calling `__enter__`."""
    import torch

    seen = Seen(device)
    seen.sample()
    cls = torch.autocast
    original = cls.__enter__

    @functools.wraps(original)
    def enter(self: Any) -> Any:
        result = original(self)
        seen.note(getattr(self, "device", None), getattr(self, "fast_dtype", None),
                  getattr(self, "_enabled", False))
        return result

    check = torch._amp_foreach_non_finite_check_and_unscale_

    @functools.wraps(check)
    def checked(grads: Any, found_inf: Any, inv_scale: Any) -> Any:
        result = check(grads, found_inf, inv_scale)
        seen.found_inf.append(float(found_inf))
        return result

    cls.__enter__ = enter  # type: ignore[method-assign]
    torch._amp_foreach_non_finite_check_and_unscale_ = checked  # type: ignore[assignment]
    try:
        yield seen
    finally:
        cls.__enter__ = original  # type: ignore[method-assign]
        torch._amp_foreach_non_finite_check_and_unscale_ = check
