"""Which collected tests are checks, once every other plugin has collected: a marked test
becomes a `CheckItem` (its markers checked first, a wrong one a usage error naming it),
then this machine's shard and a recording session's selection keep theirs, and a
collect-only session asked by `bisect` lists them (history/baseline.collect_checks)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, List

import pytest

from pytest_compilecache import layers
from pytest_compilecache.case import marker_problem
from pytest_compilecache.controller import order
from pytest_compilecache.controller.item import CheckItem
from pytest_compilecache.controller.role import Role
from pytest_compilecache.judge import accepted
from pytest_compilecache.terms import LIST_CHECKS_ENV

MARKER = "compile_cache"


def checks_of(session: Any, config: pytest.Config, items: List[pytest.Item]) -> None:
    """`items`, in place: each marked test its CheckItem, the rest deselected as asked."""
    for i, item in enumerate(items):
        marker = _checked_markers(item)
        if isinstance(item, pytest.Function) and marker and item.parent is not None:
            items[i] = CheckItem.from_parent(item.parent, name=item.name, original=item,
                                             check_session=session)
    if session.settings.shard:
        from pytest_compilecache.render import shard

        index, count = session.settings.shard
        # only a report every machine is given balances the slices: each machine's own
        # store may differ, and then slices would overlap or leave a check out
        times = session.check_times() if session.settings.shard_times else None
        checks = [i.nodeid for i in items if isinstance(i, CheckItem)]
        mine = shard.select(checks, index, count, times)
        _deselect(config, items, lambda i: not isinstance(i, CheckItem) or i.nodeid in mine)
    if session.settings.select:  # a recording session runs only the checks it was given
        from pytest_compilecache import jsonfile

        try:
            wanted = set(map(str, jsonfile.load(session.settings.select)))
        except (OSError, ValueError, TypeError) as e:  # Unreadable is a ValueError
            raise pytest.UsageError(f"--compile-cache-select: {e}; pass a JSON list of "
                                    f"node ids") from None
        _deselect(config, items, lambda i: i.nodeid in wanted)
    # the order a run hands them out in (--collect-only shows it)
    nodes, chunk = order.load_scheduling(config)
    order.longest_first(items, lambda i: isinstance(i, CheckItem), lambda i: i.nodeid,
                        session.check_times(), nodes, chunk)
    listed = os.environ.get(LIST_CHECKS_ENV)
    if listed and config.option.collectonly and session.role == Role.CONTROLLER:
        Path(listed).write_text(json.dumps([i.nodeid for i in items
                                            if isinstance(i, CheckItem)]))


def _checked_markers(item: pytest.Item) -> Any:
    """The item's compile_cache marker, or None; a wrong one, or a wrong accept marker
    (on a test without compile_cache too, which a module's pytestmark may give it: else
    ignored without a word), is a usage error naming the test."""
    marker = item.get_closest_marker(MARKER)
    wrong = marker and marker_problem(marker.args, marker.kwargs)
    if wrong:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{MARKER}(...): {wrong}")
    accept = item.get_closest_marker(accepted.MARKER)
    wrong = accept and accepted.marker_problem(accept.args, accept.kwargs, layers.LAYERS)
    if wrong:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{accepted.MARKER}(...): {wrong}")
    return marker


def _deselect(config: pytest.Config, items: List[pytest.Item], keep: Any) -> None:
    drop = [i for i in items if not keep(i)]
    if drop:
        items[:] = [i for i in items if keep(i)]
        config.hook.pytest_deselected(items=drop)
