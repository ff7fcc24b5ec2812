"""Checks handed out longest first, where earlier times are known (a report given as
--compile-cache-shard-times, else the store's times.json): the longest check starts
first and the short ones fill the GPUs at the end, instead of whatever collection order
left last. Only the checks move, among the places checks had; every other test keeps
its place. In an xdist session the controller reads the times once and hands them to
its workers (their collections must agree item for item)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, TypeVar

T = TypeVar("T")


def longest_first(items: List[T], is_check: Callable[[T], bool], nodeid: Callable[[T], str],
                  times: Dict[str, float]) -> bool:
    """`items`, in place; True where the order changed. A check without a time costs
    the median of the known ones; ties keep collection order."""
    slots = [k for k, item in enumerate(items) if is_check(item)]
    checks = [items[k] for k in slots]
    known = sorted(times[nodeid(c)] for c in checks if nodeid(c) in times)
    if not known:
        return False
    median = known[len(known) // 2]
    ordered = [c for _, c in sorted(enumerate(checks), key=lambda kc: (
        -times.get(nodeid(kc[1]), median), kc[0]))]
    for k, c in zip(slots, ordered):
        items[k] = c
    return ordered != checks


def known_times(workerinput: Optional[Dict[str, Any]], shard_times: Optional[str],
                store_path: Optional[Path]) -> Dict[str, float]:
    """Earlier seconds per check: an xdist worker's from its controller (so their
    collections agree), else the report given as --compile-cache-shard-times (raises
    render.shard.BadTimes for one that cannot be read), else the store's (history/times.py)."""
    if workerinput is not None:
        return dict(workerinput.get("compilecache_times") or {})
    if shard_times:
        from pytest_compilecache.render import shard

        return shard.times_from_report(shard_times)
    from pytest_compilecache.history import times

    return times.read(store_path) if store_path else {}
