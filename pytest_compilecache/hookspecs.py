"""Hooks pytest-compilecache offers to conftest.py files."""
from __future__ import annotations

from pathlib import Path
from typing import Any, List

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


@pytest.hookspec
def pytest_compilecache_warm_start_paths() -> List[Any]:  # type: ignore[empty-body]
    """Return warm-start path classes to add to ``--compile-cache-via``.

    Each is a subclass of ``pytest_compilecache.paths.WarmStartPath`` (or of a built-in
    path, such as ``pytest_compilecache.paths.local.LocalRestart``) with a ``name`` and
    ``via`` of its own: its phases, its environment and its rule run in the controller,
    its ``before`` / ``compile`` / ``after`` in each phase process, where the hook is
    called again. Its results are reported under its ``via``::

        # conftest.py
        from pytest_compilecache.paths.local import LocalRestart

        class Nightly(LocalRestart):
            name = via = "nightly"
            summary = "nightly (the local restart with our serving flags)"

        def pytest_compilecache_warm_start_paths():
            return [Nightly]

    .. versionadded:: 0.2
    """


@pytest.hookspec
def pytest_compilecache_scenarios() -> List[Any]:  # type: ignore[empty-body]
    """Return scenario classes: each switches a warm-start path on for the session.

    Each is a subclass of ``pytest_compilecache.scenarios.base.Scenario`` with a ``name``
    (the path it runs: a built-in one or one ``pytest_compilecache_warm_start_paths``
    returns) and a ``switch`` of its own, ``--compile-cache-<switch>``, registered when
    the conftest loads; ``stands_in`` says whether its path runs alone or in the local
    restart's place::

        # conftest.py
        from pytest_compilecache.scenarios.base import Scenario

        class Nightly(Scenario):
            name, switch, help = "nightly", "nightly", "the nightly restart"

        def pytest_compilecache_scenarios():
            return [Nightly]

    .. versionadded:: 0.2
    """
