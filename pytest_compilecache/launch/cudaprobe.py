"""How the preloaded interpreter answers torch's "is CUDA available?" while it imports
the compile stack, without initialising CUDA (which would poison every fork): through
NVML, the answer kept for each phase to check under its own CUDA_VISIBLE_DEVICES."""
from __future__ import annotations

import os
from typing import Any, Optional

from pytest_compilecache.launch.envspy import EnvSpy


class CudaAsked:
    """While the compile stack imports: `torch.cuda.is_available()` (asked at import by
    torch 2.11's inductor, runtime/benchmarking.py) answered through NVML, which does not
    poison forks as the CUDA runtime's device count does, and the answer kept for each
    phase to check under its own CUDA_VISIBLE_DEVICES. Without NVML, the real check runs
    (and the fork probe says if it touched CUDA)."""

    def __init__(self) -> None:
        self.answer: Optional[bool] = None
        self._real: Any = None

    def __enter__(self) -> None:
        import torch

        self._real = real = torch.cuda.is_available
        asked = self

        def is_available() -> bool:
            if asked._real is None:  # kept by reference somewhere: the real check now
                return bool(real())
            got = nvml_cuda_available()
            if got is None:
                return bool(real())
            asked.answer = got
            return got

        torch.cuda.is_available = is_available

    def __exit__(self, *exc: Any) -> None:
        import torch

        torch.cuda.is_available = self._real
        self._real = None


def nvml_cuda_available() -> Optional[bool]:
    """Is a CUDA device visible (CUDA_VISIBLE_DEVICES applied), asked of NVML; None where
    NVML cannot tell. Never initialises CUDA."""
    import torch

    if not torch.cuda._is_compiled():
        return False
    count = getattr(torch.cuda, "_device_count_nvml", None)
    if count is None:
        return None
    env: Any = os.environ
    spy: Optional[EnvSpy] = env if isinstance(env, EnvSpy) else None
    if spy is not None:
        spy.quiet += 1
    try:
        n = int(count())
    except Exception:
        return None
    finally:
        if spy is not None:
            spy.quiet -= 1
    return None if n < 0 else n > 0
