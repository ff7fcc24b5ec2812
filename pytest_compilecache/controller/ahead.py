"""Recordings side by side: in a session whose every warm-start path times nothing (a
recording of keys: --compile-cache-keys-only, --compile-cache-manifest-only), the checks'
phases run as many at a time as the session has device slots, started ahead of pytest's
loop; each check's item then concludes its own (its keys to the store, the baseline's
drift, the report) in pytest's order, on the main thread.

A recording has no verdict and keeps no time, so phases that share the machine change
nothing it records; a session with a timed path runs one phase at a time (xdist's
workers, each holding a slot, are how such checks share a machine). Each run forks from
a preloaded interpreter of its own (`CheckRun.lane`): an interpreter serves one phase at
a time.
"""
from __future__ import annotations

import concurrent.futures
import os
import queue
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from pytest_compilecache.controller.check import CheckRun
from pytest_compilecache.launch.descendants import side_by_side
from pytest_compilecache.model import CheckResult
from pytest_compilecache.paths.base import WarmStartPath

Waiter = Callable[[], CheckResult]


class Ahead:
    """The runs started ahead, by (node id, path name), until their item takes them."""

    def __init__(self, session: Any, runs: Sequence[CheckRun], width: int) -> None:
        self.session = session
        self._side_by_side = side_by_side()  # what a phase left is told by its mark
        self._side_by_side.__enter__()
        self._waited: List[CheckRun] = []  # runs whose wait an interrupt broke off
        environ = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
        for run in runs:
            run.environ = environ
        self._lanes: "queue.Queue[int]" = queue.Queue()
        for lane in range(width):  # the cold phase of a run on lane k forks from interpreter k
            self._lanes.put(lane)
        self._pool = concurrent.futures.ThreadPoolExecutor(
            width, thread_name_prefix="compilecache-ahead")
        self._runs: Dict[Tuple[str, str], Tuple[CheckRun, "concurrent.futures.Future[CheckResult]"]] = {
            (run.item.nodeid, run.path.name): (run, self._pool.submit(self._phases, run))
            for run in runs}

    @classmethod
    def from_item(cls, session: Any, item: Any, worker: bool) -> Optional["Ahead"]:
        """At the first check pytest runs: the checks from there on in pytest's order.
        Not in an xdist worker, which is handed one check at a time."""
        from pytest_compilecache.controller.item import CheckItem

        if worker:
            return None
        items = list(getattr(item.session, "items", None) or [item])
        later = items[items.index(item):] if item in items else [item]
        return cls.start(session, [i for i in later if isinstance(i, CheckItem)
                                   and (i is item or not _skipped(i))],
                         session.warm_start_paths)

    @classmethod
    def start(cls, session: Any, items: Sequence[Any],
              paths: Sequence[WarmStartPath]) -> Optional["Ahead"]:
        """Started, where more than one check could run at once; else None (the checks
        run in pytest's loop, one phase at a time). `items`: the checks still to run, in
        pytest's order. Only one-phase paths: a run's later phases would fork from the
        interpreter another run holds."""
        if not paths or not all(p.runs_ahead and len(p.phases) == 1 for p in paths):
            return None
        width = min(len(session.slot_pool().slots), len(items) * len(paths))
        if width < 2:
            return None
        session.pch_dir()  # made once, here, not by the first runs at once
        widen = getattr(session.launcher, "widen", None)
        if widen is not None:  # started from this thread, which outlives every run
            widen(width)
        return cls(session, [CheckRun(session, item, path) for item in items for path in paths],
                   width)

    def _phases(self, run: CheckRun) -> CheckResult:
        lane = self._lanes.get()
        try:
            run.lane = lane
            return run.phases()
        finally:
            self._lanes.put(lane)

    def take(self, item: Any, path: WarmStartPath) -> Tuple[Optional[CheckRun], Optional[Waiter]]:
        """The run started for this check and path, and the wait for its phases' result
        (shown as the check's progress); (None, None) where none was started for it."""
        got = self._runs.pop((item.nodeid, path.name), None)
        if got is None:
            return None, None
        run, future = got

        def wait() -> CheckResult:
            try:
                with self.session.progress.step("cold phase, run beside the others; waited for it"):
                    return future.result()
            except KeyboardInterrupt:  # its phase goes on until the launcher's close
                self._waited.append(run)
                raise
        return run, wait

    def cancel(self) -> None:
        """The runs not started yet never start, a wait for a slot ends (a session that
        stops early: -x, an interrupt); the launcher's close ends the phases running."""
        for _, future in self._runs.values():
            future.cancel()
        self.session.slot_pool().stopped = True

    def close(self) -> None:
        """After the launcher's close (the threads outlive the lanes a thread started):
        the threads end; the roots of runs no item took, or whose wait an interrupt broke
        off, go (pytest reported no result of theirs), unless --compile-cache-keep."""
        self.cancel()
        self._pool.shutdown(wait=True)
        self._side_by_side.__exit__(None, None, None)
        left = [run for run, _ in self._runs.values()] + self._waited
        self._runs.clear()
        if not self.session.settings.keep:
            for run in left:
                for root in run.roots:
                    root.remove()


def _skipped(item: Any) -> bool:
    """Whether pytest will skip it at setup (skip, skipif, xfail(run=False)): its phases
    must not run. Where pytest's own evaluation is not at hand, not skipped."""
    try:
        from _pytest.skipping import evaluate_skip_marks, evaluate_xfail_marks

        xfail = evaluate_xfail_marks(item)
        return evaluate_skip_marks(item) is not None or (xfail is not None and not xfail.run)
    except Exception:  # a condition that raises is pytest's to report, at setup
        return False
