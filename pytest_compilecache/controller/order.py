"""Checks handed out longest first, where earlier times are known (a report given as
--compile-cache-shard-times, else the store's times.json): the longest check starts
first and the short ones fill the GPUs at the end, instead of whatever collection order
left last. Only the checks move, among the places checks had; every other test keeps
its place. In an xdist session the controller reads the times once and hands them to
its workers (their collections must agree item for item)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar

T = TypeVar("T")


def longest_first(items: List[T], is_check: Callable[[T], bool], nodeid: Callable[[T], str],
                  times: Dict[str, float], load_nodes: int = 0,
                  max_chunk: Optional[int] = None) -> bool:
    """`items`, in place; True where the order changed. A check without a time costs
    the median of the known ones; ties keep collection order. `load_nodes`: the workers
    of an xdist `--dist load` session, where every item is a check: laid out for its
    hand-out (`for_load_scheduling`)."""
    slots = [k for k, item in enumerate(items) if is_check(item)]
    checks = [items[k] for k in slots]
    known = sorted(times[nodeid(c)] for c in checks if nodeid(c) in times)
    if not known:
        return False
    median = known[len(known) // 2]
    ordered = [c for _, c in sorted(enumerate(checks), key=lambda kc: (
        -times.get(nodeid(kc[1]), median), kc[0]))]
    if load_nodes > 1 and len(slots) == len(items):
        ordered = for_load_scheduling(ordered, load_nodes, max_chunk)
    for k, c in zip(slots, ordered):
        items[k] = c
    return ordered != checks


def for_load_scheduling(items: List[T], nodes: int, max_chunk: Optional[int] = None) -> List[T]:
    """`items` (longest first) laid out for pytest-xdist's `--dist load`, which sends
    its first tests to the workers by position: with fewer than two tests per worker one
    each in turn, else a chunk of consecutive tests to each (at least 2; `max_chunk`:
    its --maxschedchunk), the rest to whichever worker runs low. Where those first
    chunks are every test (up to two per worker, a few models on a few GPUs), plain
    longest first would give the two longest to one worker, to run one after the other
    while the others sit idle at the end: there the tests are dealt like cards, longest
    first, back and forth across the workers (the worker dealt the longest gets the
    shortest). Otherwise the rest are handed out as workers run low, which longest
    first already balances."""
    n, total = max(int(nodes), 1), len(items)
    if n < 2 or total < 2:
        return list(items)
    if total < 2 * n:  # one each in turn: position p goes to worker p % n
        return list(reversed(items[:n])) + list(items[n:])
    chunk = max(min((total // n) // 4, max_chunk or total), 2)
    if n * chunk < total:  # the rest go to whichever worker runs low: longest first is it
        return list(items)
    dealt: List[List[T]] = [[] for _ in range(n)]
    for r in range(chunk):
        workers = range(n) if r % 2 == 0 else range(n - 1, -1, -1)
        for w, item in zip(workers, items[r * n:(r + 1) * n]):
            dealt[w].append(item)
    return [item for hand in dealt for item in hand] + list(items[n * chunk:])


def load_scheduling(config: Any) -> Tuple[int, Optional[int]]:
    """(workers, --maxschedchunk) of an xdist `--dist load` session, else (0, None):
    how it hands tests out (`for_load_scheduling`). A worker has it from its controller
    (workerinput), so their collections agree."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        nodes, chunk = workerinput.get("compilecache_load") or (0, None)
        return int(nodes), chunk
    opt = config.option
    if getattr(opt, "dist", "no") != "load" or not getattr(opt, "tx", None):
        return 0, None
    return len(opt.tx), getattr(opt, "maxschedchunk", None)


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
