"""Checks handed out longest first, where earlier times are known (a report given as
--compile-cache-shard-times, else the store's times.json): the longest check starts
first and the short ones fill the GPUs at the end, instead of whatever collection order
left last. Only the checks move, among the places checks had; every other test keeps
its place. In an xdist session the controller reads the times once and hands them to
its workers (their collections must agree item for item)."""
from __future__ import annotations

from typing import Callable, Dict, List, TypeVar

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

