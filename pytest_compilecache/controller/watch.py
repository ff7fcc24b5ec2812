"""The xdist controller's side of a check's progress: its workers' reports (a setup
report when a check starts, a call report when it ends, each sent as it happens) turned
into `progress.Workers` lines, and the thread that says the running checks when the
session has been silent for a while. Registered in the xdist controller only."""
from __future__ import annotations

import functools
import os
import threading
from typing import Any, Optional

import pytest

from pytest_compilecache.controller.gpus import held_slots
from pytest_compilecache.controller.progress import Workers

HEARTBEAT_S = 30.0  # a line after this long without one: a CI log shows no silence longer


class WorkerWatch:
    def __init__(self, config: pytest.Config, lock_dir: Optional[str]) -> None:
        self.config, self.lock_dir = config, lock_dir
        self.workers: Optional[Workers] = None
        self.stop = threading.Event()
        self.thread: Optional[threading.Thread] = None

    @pytest.hookimpl
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        out = getattr(getattr(reporter, "_tw", None), "_file", None)
        tty = bool(getattr(out, "isatty", lambda: False)()) and os.environ.get("TERM") != "dumb"
        self.workers = Workers(functools.partial(_say, reporter), log=not tty,
                               every_s=HEARTBEAT_S,
                               held=functools.partial(held_slots, self.lock_dir))
        self.thread = threading.Thread(target=self._beat, daemon=True,
                                       name="compilecache-heartbeat")
        self.thread.start()

    def _beat(self) -> None:
        while not self.stop.wait(min(1.0, HEARTBEAT_S / 4)):
            if self.workers is not None:
                self.workers.beat()

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """A check's setup report says it started on its worker; the call report (or a
        setup that did not pass, or xdist's report of a crashed worker, which has no
        keywords) that it ended."""
        if self.workers is None or report.when == "teardown":
            return
        gateway = getattr(getattr(report, "node", None), "gateway", None)
        worker = str(getattr(gateway, "id", "?"))  # xdist sets `node` on a worker's report
        running = self.workers.running.get(worker, ("",))[0] == report.nodeid
        if not running and "compile_cache" not in report.keywords:
            return
        if report.when == "setup" and report.passed:
            self.workers.started(worker, report.nodeid)
        else:
            self.workers.finished(worker, report.nodeid, report.outcome)

    @pytest.hookimpl
    def pytest_sessionfinish(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=2)


def _say(reporter: Any, text: str) -> None:
    """A line of its own: under xdist pytest's progress characters leave the line open
    (the reporter's `write_line` starts a new one only after a file name)."""
    width = getattr(getattr(reporter, "_tw", None), "width_of_current_line", 0)
    if width and not getattr(reporter, "currentfspath", None):
        reporter.write("\n")
    reporter.write_line(text)
