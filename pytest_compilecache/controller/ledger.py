"""Every check of a session ends in its report, whatever happens to the processes.

xdist workers publish, as they go, the checks they collected, each check they start
and each result, as files in a directory private to the controller's session (its
path travels in xdist's workerinput, as the lock and header dirs' do). At the end the
controller reads them into its spool (spool.py: the row stays in memory, the result on
disk until the report is written) and gives a verdict to every check that left no
result: `error` when the process running it died, `not run` when an interruption
skipped it. No pytest, no torch.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any, Dict, Iterable, Optional, Set

from pytest_compilecache.controller.diskspace import write_problem
from pytest_compilecache.controller.spool import PREFIX as SPOOLED
from pytest_compilecache.controller.spool import Spool
from pytest_compilecache.files import write_json_atomic
from pytest_compilecache.leftovers import mark_owner
from pytest_compilecache.model import CheckResult

RESULTS_DIR_ENV = "PYTEST_COMPILECACHE_RESULTS_DIR"


def open_results_dir() -> str:
    """The controller's directory, inherited by the xdist workers it starts."""
    path = tempfile.mkdtemp(prefix="pytest-compilecache-results-")
    mark_owner(Path(path))  # a killed session's is found by `clean`
    os.environ[RESULTS_DIR_ENV] = path
    return path


UNPUBLISHED = "compile-cache: an xdist worker could not hand this check's result to the controller"


class Unpublished(Exception):
    """A worker's result that could not be written where the controller reads it."""


class Ledger:
    """The controller's account of the session's checks; in an xdist worker, where it
    publishes them (the directory is handed over in xdist's workerinput, and fixed at
    configure: a test that clears its environment loses nothing)."""

    def __init__(self, results_dir: Optional[str]) -> None:
        self.results_dir = results_dir
        self.started: Set[str] = set()
        self.collected: Set[str] = set()
        self.failed: Dict[str, str] = {}  # node id -> longrepr of a failed test report
        self.manifests: Set[str] = set()  # the key manifests the workers wrote
        self.timelines: Dict[str, Dict[str, float]] = {}  # worker id -> its instants

    def publish(self, kind: str, data: Dict[str, Any]) -> None:
        """A worker's record: the checks it `collected`, a check `started`, a `result`,
        a key `manifest` it wrote, or its `timeline` at the end.
        A refused write fails the worker's test with a line the controller's account
        quotes (the disk, not a crash)."""
        if self.results_dir:
            try:
                write_json_atomic(Path(self.results_dir) / f"{kind}-{uuid.uuid4().hex}.json",
                                  data)
            except OSError as e:
                raise Unpublished(f"{UNPUBLISHED}: "
                                  f"{write_problem(kind, self.results_dir, e)}") from None

    def failed_report(self, nodeid: str, text: str) -> None:
        """A crashed worker leaves a failed report (xdist gives it no keywords); its last
        lines are all that a check without a result is told."""
        self.failed.setdefault(nodeid, "\n".join(text.strip().splitlines()[-12:]))

    def collect(self, spool: Spool) -> None:
        """Add what the workers published to `spool` (their files stay where they are,
        read again when the report is written)."""
        d = self.results_dir
        if not d or not os.path.isdir(d):
            return
        have = set(spool.ids())  # a check has a result per path
        for f in sorted(Path(d).glob("*.json")):
            try:
                if f.name.startswith(SPOOLED):
                    continue
                data = json.loads(f.read_text())
                if f.name.startswith("started-"):
                    self.started.add(data["nodeid"])
                elif f.name.startswith("collected-"):
                    self.collected.update(data["nodeids"])
                elif f.name.startswith("manifest-"):  # the controller's summary names it
                    self.manifests.add(str(data["path"]))
                elif f.name.startswith("timeline-"):
                    self._add_timeline(data)
                else:
                    r = CheckResult.from_json(data)
                    del data
                    if (r.nodeid, r.via) not in have:
                        spool.adopt(f, r)
                        have.add((r.nodeid, r.via))
            except (OSError, ValueError, TypeError, KeyError):
                continue

    def _add_timeline(self, data: Dict[str, Any]) -> None:
        """A worker's instants (the report's timeline), numbers only."""
        got = data["marks"]
        marks = {str(k): float(v) for k, v in (got.items() if isinstance(got, dict) else ())
                 if isinstance(v, (int, float)) and not isinstance(v, bool)}
        self.timelines[str(data["worker"])[:32]] = marks

    def close(self) -> None:
        """The session has written its report: the directory goes."""
        if self.results_dir:
            shutil.rmtree(self.results_dir, ignore_errors=True)

    def account(self, spool: Spool, check_ids: Iterable[str],
                deselected: Set[str], interrupted_by: Optional[str]) -> None:
        """A verdict for every check without a result."""
        have = {r.nodeid for r in spool.rows}
        for nodeid, tail in self.failed.items():
            said = [line for line in tail.splitlines() if UNPUBLISHED in line]
            if nodeid not in have and (nodeid in self.started or said):
                spool.add(CheckResult(
                    nodeid=nodeid, verdict="error",
                    error=said[-1][said[-1].index(UNPUBLISHED):] if said else
                    "the process running this check died without a result (an xdist "
                    "worker crashed or was killed: out of memory?):\n" + tail))
                have.add(nodeid)
        if interrupted_by is None:
            return
        for nodeid in list(check_ids) + sorted(self.collected):
            if nodeid not in have and nodeid not in deselected:
                spool.add(CheckResult(
                    nodeid=nodeid, verdict="not run",
                    error=f"the session was interrupted ({interrupted_by}) before this check ran"))
                have.add(nodeid)
