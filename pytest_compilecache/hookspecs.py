"""Hooks pytest-compilecache offers to conftest.py files."""
from __future__ import annotations

from pathlib import Path

import pytest


@pytest.hookspec
def pytest_compilecache_between_phases(item: pytest.Item, cache_root: Path) -> None:
    """Called in the controller after a check's cold phase, before its warm phase.

    ``cache_root`` holds ``inductor/`` (TORCHINDUCTOR_CACHE_DIR), ``triton/`` and
    ``tmp/``. Use it to simulate what happens to caches between a build and a deploy,
    e.g. copying them elsewhere, or to inject a fault in tests::

        # conftest.py
        def pytest_compilecache_between_phases(item, cache_root):
            for entry in (cache_root / "inductor" / "fxgraph").rglob("*"):
                ...

    .. versionadded:: 0.1
    """
