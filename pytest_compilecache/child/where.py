"""Where a phase's output comparisons compute: on the check's GPU where the phase ran
on CUDA, else on one CPU thread (`comparing`). Runs in the child with torch alone."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, List, Optional, Tuple


# where the comparisons compute (`comparing`): None, the CPU; else the check's GPU
_WHERE: List[Any] = [None]


@contextlib.contextmanager
def comparing(device: Optional[str]) -> Iterator[None]:
    """The comparisons' arithmetic off the phase's busy CPU threads: on the check's GPU
    where the phase ran on CUDA (the outputs stay CPU copies; each tensor is moved as
    it is compared), and on one CPU thread, the phase's thread count back afterwards.
    They run while a warm phase's compile workers are often still
    starting on every core, where torch's intra-op threads wait for one another: on an
    H100 (resnet18 training, 16 threads) 126 `assert_close` calls took 2.4 s of the warm
    phase's 3.2 s of comparisons, a tenth of that in the cold phase; one CPU thread took
    2.3 s in both; on a loaded 2-core machine, 17-27 s on 2 threads, 2.3 s on one. Only
    the comparisons: the eager and float64 runs keep the phase's device and threads."""
    import torch

    gpu = device == "cuda" and torch.cuda.is_available() and torch.cuda.is_initialized()
    n = torch.get_num_threads()
    if n > 1:
        torch.set_num_threads(1)
    _WHERE[0] = torch.device("cuda", torch.cuda.current_device()) if gpu else None
    try:
        yield
    finally:
        _WHERE[0] = None
        if n > 1:
            torch.set_num_threads(n)


def on_compare_device(*tensors: Any) -> Tuple[Any, ...]:
    """`tensors` where the comparisons compute (`comparing`); None stays None."""
    where = _WHERE[0]
    if where is None:
        return tensors
    return tuple(t.to(where) if t is not None and hasattr(t, "to") else t for t in tensors)
