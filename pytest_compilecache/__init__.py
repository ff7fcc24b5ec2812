"""pytest-compilecache: check that torch.compile caches hit on a warm start.

Only the public API lives here; importing it must not import torch.
"""
from __future__ import annotations

from pytest_compilecache.case import ModelCase

__all__ = ["ModelCase", "__version__"]


def __getattr__(name: str) -> str:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("pytest-compilecache")
        except PackageNotFoundError:  # running from a source checkout
            return "0+unknown"
    raise AttributeError(name)
