"""Which outputs of a check depend on random draws (dropout, stochastic depth, noise).

Compiled code draws other random numbers than eager (Inductor has its own generator),
so such a tensor cannot be compared with eager nor with a float64 run: each drops other
samples. It is found from the workload itself: the eager reference runs again with
another seed given to its random draws, and what changes is random. Eager kernels can
be nondeterministic too (atomic adds), so where something changes, the reference runs a
third time with its own seed, and only a change well above that run-to-run noise counts.

Runs in the child with torch alone; no pytest.
"""
from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, List, Optional

from pytest_compilecache.child.compare import Outputs, rms
from pytest_compilecache.child.where import on_compare_device

# the seeds the eager reference's random draws get: the reference itself, and the probe
REFERENCE_SEED = 1234
PROBE_SEED = 987654321
# a change with the seed counts as random when it is this many times the change between
# two runs with the same seed (nondeterministic kernels), and not close under
# assert_close's defaults
ABOVE_NOISE = 10.0


@contextlib.contextmanager
def draws(seed: int) -> Iterator[None]:
    """Random draws inside come from `seed`; those outside are untouched (the
    generators are put back afterwards), so inputs drawn around the region stay equal."""
    import torch

    from pytest_compilecache.child import replay

    saved = replay.capture()
    torch.manual_seed(seed)
    try:
        yield
    finally:
        replay.restore(saved)


def seed_dependent(reference: Outputs, probe: Outputs, again: Optional[Outputs]
                   ) -> List[Dict[str, Any]]:
    """The tensors of `reference` that `probe` (the same eager step with another seed)
    changes beyond the run-to-run noise that `again` (the same seed once more) shows;
    each with how far the seed moved it, relative to its size."""
    from pytest_compilecache.child.compare import assert_close_message

    out: List[Dict[str, Any]] = []
    for name in sorted(reference):
        a, b = reference[name], probe.get(name)
        if b is None or a.shape != b.shape or a.dtype != b.dtype:
            continue
        a, b = on_compare_device(a, b)
        if assert_close_message(a, b, {}) is None:
            continue  # equal, or within rounding noise: comparable with compiled code
        moved = _dist(a, b)
        noise = (_dist(a, *on_compare_device(again[name]))
                 if again is not None and name in again else 0.0)
        if moved > ABOVE_NOISE * noise:
            size = rms(a.double()) if a.is_floating_point() else 0.0
            out.append({"name": name, "seed_moved_rel": round(moved / size, 4) if size else None})
    return out


def _dist(a: Any, b: Any) -> float:
    if a.shape != b.shape:
        return float("inf")
    if a.is_floating_point() or a.is_complex():
        return rms((a.double() - b.double()).nan_to_num(0))
    return float((a != b).sum())
