"""The controller's pytest session: the hooks that turn marked tests into checks, hand
each to a `check.CheckRun`, and report what they found; and what the checks share (the
launcher, device slots, the precompiled-header dir, the key history, the xdist ledger).

The controller never imports torch: fixtures run only in the phase children.
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys
import types
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from pytest_compilecache import adopted, paths
from pytest_compilecache.controller import diskspace
from pytest_compilecache.controller.fleet import check_run, paths_for
from pytest_compilecache.controller.gpus import forget_lock_dir
from pytest_compilecache.controller.item import CheckItem
from pytest_compilecache.controller.limits import LATER_FACTOR, LATER_FLOOR_S
from pytest_compilecache.controller.keyhistory import KeyHistory
from pytest_compilecache.controller.order import known_times, load_scheduling
from pytest_compilecache.controller.ledger import Ledger, Unpublished
from pytest_compilecache.controller.progress import Progress
from pytest_compilecache.controller.spool import Spool
from pytest_compilecache.controller.variants import SHARED_DIR_ENV
from pytest_compilecache.controller.role import Role, role_of
from pytest_compilecache.isolation import CacheRoot, phase_env
from pytest_compilecache.launch.launcher import Launcher, SubprocessLauncher, pytest_child_flags
from pytest_compilecache.leftovers import remove_owned
from pytest_compilecache.model import CheckResult
from pytest_compilecache.options import DEFAULT_TIMEOUT_S
from pytest_compilecache.settings import Settings
from pytest_compilecache.paths.base import WarmStartPath
from pytest_compilecache.render import report, terminal
from pytest_compilecache.timeline import Timeline

PCH_DIR_ENV = "PYTEST_COMPILECACHE_PCH_DIR"


class CompileCacheSession:
    """Registered as a plugin in pytest_configure; holds this session's results."""

    def __init__(self, config: pytest.Config, settings: Settings,
                 launcher: Optional[Launcher] = None) -> None:
        self.config, self.settings = config, settings
        self.role = role_of(config)
        self.launcher: Launcher = launcher or SubprocessLauncher()
        self._times: Optional[Dict[str, float]] = None  # check_times(), read once
        self.ahead: Any = False  # ahead.Ahead, None: none run side by side; False: not asked
        self.said_dropped = False  # the launcher's missing preload is said once per session
        self.history = KeyHistory(config, settings)
        self.owned_pch_dir: Optional[Path] = None  # made by this controller; removed at the end
        self.pch_path: Optional[str] = None  # the session's shared precompiled-header dir
        self.lock_path: Optional[str] = None  # the session's slot-lock dir
        self.started = report.now()
        self._deselected: set = set()
        self._pool: Any = None  # gpus.SlotPool, built on first use
        self.owned_lock_dir: Optional[str] = None  # made by this controller; removed at the end
        self.shared_path: Optional[str] = None  # the variants' shared caches (variants.py)
        self.owned_shared_dir: Optional[Path] = None  # made by this controller
        self._shared: Any = None  # variants.SharedCaches, built on first use
        self._collected_files: set = set()
        self._locations: Dict[str, Dict[str, Any]] = {}  # node id -> test file and def line
        self.gone: List[str] = []
        self.interrupted: Optional[Dict[str, str]] = None
        self.no_checks: Optional[str] = None  # why nothing was checked, at the end
        self.report_problem: Optional[str] = None  # why the report could not be written
        self.report_said: List[str] = []  # what writing it replaced (a symlink, a mode)
        self.report_path = settings.report  # where it went (beside it: a clashing writer)
        self.report_aside: Optional[str] = None  # where the earlier report went at start
        self.ledger = Ledger(None)  # the controller's gets its results dir in configure
        self.spool = Spool(None)  # and its checks go there as they finish
        self.progress = Progress()  # shows nothing until the session starts on a terminal
        self.timeline = Timeline()  # where the session's wall time goes (the report's)
        self.timeline.mark("configure")

    @property
    def results(self) -> List[CheckResult]:
        """Every check's summary row (CheckResult.summary_row); the results are spooled."""
        return self.spool.rows

    @property
    def store_path(self) -> Optional[Path]:
        return self.history.store_path

    @property
    def manifest_paths(self) -> set:
        """The key manifests this session wrote: its own, and under xdist its workers'."""
        return {str(p) for p in self.history.manifest_paths} | self.ledger.manifests

    def baseline(self) -> Any:
        return self.history.baseline()

    # -- collection ------------------------------------------------------------------
    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: List[pytest.Item]) -> None:
        """Last: a conftest's own implementation (the usual place to mark tests) and
        `-k`/`-m` have run, so the markers it added are seen."""
        from pytest_compilecache.controller import collect

        collect.checks_of(self, config, items)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """The preloaded interpreters import torch while this process collects (not in
        an xdist controller, which runs no phase): started here, or kept from their start
        before the conftests (controller/early.py)."""
        self.timeline.mark("sessionstart")
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None and self.role is not Role.WORKER:
            out = getattr(getattr(reporter, "_tw", None), "_file", None)
            capman = self.config.pluginmanager.get_plugin("capturemanager")
            self.progress = Progress(reporter, int(self.config.getoption("verbose", 0) or 0),
                                     live=bool(getattr(out, "isatty", lambda: False)())
                                     and os.environ.get("TERM") != "dumb",
                                     uncaptured=capman.global_and_fixture_disabled
                                     if capman is not None else contextlib.nullcontext)
        if getattr(self.config.option, "collectonly", False) or not self.role.runs_phases:
            return  # nothing runs a phase here
        placeholder = Path(os.devnull)  # each interpreter has cache dirs of its own
        root = types.SimpleNamespace(inductor=placeholder, triton=placeholder, tmp=placeholder)
        env = phase_env(os.environ, root, self.settings.threads, placeholder)  # type: ignore[arg-type]
        narrow = getattr(self.launcher, "narrow", None)
        if narrow is not None and paths.one_phase_each(self.warm_start_paths):
            narrow(1)  # a recording: no check has a phase for a second interpreter
        self.launcher.start(env, str(self.config.invocation_params.dir))
        self.timeline.mark("lanes started")

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.timeline.mark("collected")
        self.history.check_ids = [i.nodeid for i in session.items if isinstance(i, CheckItem)]
        self._locations = {i.nodeid: {"file": i.location[0], "line": (i.location[1] or 0) + 1}
                           for i in session.items if isinstance(i, CheckItem)}
        self._collected_files = {i.nodeid.split("::")[0] for i in session.items}
        if self.role is Role.WORKER:  # the xdist controller collects nothing
            self.ledger.publish("collected", {"nodeids": self.history.check_ids})
        if self.history.check_ids:  # what collecting the test modules imported, the phases import
            from pytest_compilecache.launch.libraries import installed_libraries

            self.launcher.preload(installed_libraries(sys.modules))

    def pytest_deselected(self, items: List[pytest.Item]) -> None:
        self._deselected.update(i.nodeid for i in items)

    # -- one check -----------------------------------------------------------------------
    def run_check(self, item: CheckItem) -> List[CheckResult]:
        """One result per warm-start path, each from a CheckRun of its own. Every check
        ends in the results, whatever happens on this side."""
        if self.role is Role.WORKER:
            self.ledger.publish("started", {"nodeid": item.nodeid})
        if self.ahead is False:  # at the first check pytest runs: recordings side by side
            from pytest_compilecache.controller.ahead import Ahead

            self.ahead = Ahead.from_item(self, item, self.role is Role.WORKER)
        results = []
        for path in paths_for(item, self.warm_start_paths, self.settings):  # ranks=N: theirs
            run, ran = self.ahead.take(item, path) if self.ahead else (None, None)
            run = run or check_run(self, item, path)
            try:
                results.append(run.run(ran))
            except KeyboardInterrupt:  # what ran of it is said, not a bare `not run`
                self._add(run.interrupted())
                raise
        for result in results:
            self._add(result)
        if self.role is Role.WORKER:  # the controller prints the `key manifest:` line
            for written in sorted(map(str, self.history.manifest_paths)):
                if written not in self.ledger.manifests:
                    self.ledger.publish("manifest", {"path": written})
                    self.ledger.manifests.add(written)
        return results

    @functools.cached_property
    def warm_start_paths(self) -> List[WarmStartPath]:
        pm = self.config.pluginmanager
        return paths.for_settings(self.settings, paths.registry(pm), self.scenarios)

    @functools.cached_property
    def scenarios(self) -> Any:
        from pytest_compilecache import scenarios

        return scenarios.registry(self.config.pluginmanager)

    def _add(self, result: CheckResult) -> None:
        """Spool a check's result (its row stays here); an xdist worker hands it to the
        controller at once instead (a worker that dies later, or an interrupted session,
        loses nothing)."""
        result.location = self._locations.get(result.nodeid, {})
        if self.role is Role.WORKER:
            self.ledger.publish("result", result.to_json())
        else:
            self.spool.add(result)

    # -- device slots --------------------------------------------------------------------
    def slot_pool(self) -> Any:
        if self._pool is None:
            from pytest_compilecache.controller import gpus

            self._pool = gpus.session_pool(self.settings, self.lock_path)
        return self._pool

    def pch_dir(self) -> Path:
        """The controller's shared precompiled-header dir (xdist workers are handed it)."""
        return Path(self.pch_path or self.open_pch_dir())

    def open_pch_dir(self) -> Path:
        """Made by the controller before xdist starts its workers, removed by it at the
        end: a worker that a SIGTERM ends early leaves nothing behind. The environment
        carries it to recording sessions; this process keeps its own copy of the path
        (a test may clear the environment)."""
        if self.pch_path is None:  # a parent session's, checked (adopted.UnsafeDir)
            self.pch_path = adopted.from_env(PCH_DIR_ENV)
        if self.pch_path is None:
            self.owned_pch_dir = CacheRoot.create("shared-pch", self.settings.root).path
            self.pch_path = str(self.owned_pch_dir)
        os.environ[PCH_DIR_ENV] = self.pch_path
        return Path(self.pch_path)

    def shared_root(self, nodeid: str) -> Any:
        """The cache root this check's function's variants share (--compile-cache-share-
        variants), or None when it has no other variant in the session."""
        from pytest_compilecache.controller import variants

        if self._shared is None:
            if self.shared_path is None:  # a session run without xdist's controller
                self.owned_shared_dir = variants.open_parent(self.settings.root)
                self.shared_path = str(self.owned_shared_dir)
            self._shared = variants.SharedCaches(Path(self.shared_path),
                                                 variants.groups_of(self.history.check_ids))
        return self._shared.root_for(nodeid)

    # -- xdist: what a worker is handed, not read from its environment ---------------
    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["compilecache_dirs"] = {
            "results": self.ledger.results_dir, "locks": self.lock_path, "pch": self.pch_path,
            "shared": self.shared_path}
        node.workerinput["compilecache_times"] = self.check_times()
        node.workerinput["compilecache_load"] = load_scheduling(self.config)

    def check_times(self) -> Dict[str, float]:
        """Earlier seconds per check, for handing them out longest first (where they
        come from: controller/order.known_times). Read once."""
        if self._times is None:
            from pytest_compilecache.render.shard import BadTimes

            try:
                self._times = known_times(getattr(self.config, "workerinput", None),
                                          self.settings.shard_times, self.store_path)
            except BadTimes as e:
                raise pytest.UsageError(str(e)) from None
        return self._times

    def adopt_dirs(self, workerinput: Dict[str, Any]) -> None:
        """In an xdist worker: the controller's results, lock and header dirs."""
        from pytest_compilecache.controller.gpus import LOCK_DIR_ENV
        from pytest_compilecache.controller.ledger import RESULTS_DIR_ENV

        dirs = workerinput.get("compilecache_dirs") or {}
        results, self.lock_path, self.pch_path, self.shared_path = (adopted.handed(  # checked
            dirs.get(k), var) for k, var in (("results", RESULTS_DIR_ENV), ("locks", LOCK_DIR_ENV),
                                             ("pch", PCH_DIR_ENV), ("shared", SHARED_DIR_ENV)))
        self.ledger = Ledger(results)

    def child_argv(self, item: CheckItem, root: CacheRoot, phase: str,
                    tree: Optional[Path] = None) -> List[str]:
        nodeid = item.nodeid
        rootdir = Path(self.config.rootpath)
        path, ini = Path(item.path), self.config.inipath
        if tree is not None:  # the same node id, collected in the baseline's worktree
            path = tree / nodeid.split("::")[0]
            if ini is not None:
                try:
                    ini = tree / Path(ini).relative_to(rootdir)
                except ValueError:
                    pass
            rootdir = tree
        target = str(path) + nodeid[len(nodeid.split("::")[0]):]
        argv = ["-m", "pytest", target, "--rootdir", str(rootdir),
                "-p", "no:cacheprovider", "-q", "--no-header", "-s",
                "--basetemp", str(root.phases / f"basetemp-{phase}")]
        if ini:
            argv += ["-c", str(ini)]
        pm = self.config.pluginmanager
        return argv + pytest_child_flags(pm.get_plugin("compilecache") is not None,
                                         pm.hasplugin("xdist"))

    # -- reporting ---------------------------------------------------------------------
    def report_dict(self, exitstatus: int) -> Dict[str, Any]:
        """The report, its checks streamed from the spool when it is written."""
        from pytest_compilecache import __version__

        s = self.settings
        data = report.build_report(
            self.results, {"device": s.device, "timeout_s": s.timeout or DEFAULT_TIMEOUT_S,
                           # without the option, a phase that starts warm: controller/limits.py
                           "timeout_warm_start": "given" if s.timeout else
                           f"{LATER_FACTOR:.0f}x the first phase, {LATER_FLOOR_S:.0f}-"
                           f"{DEFAULT_TIMEOUT_S:.0f} s", "threads": s.threads,
                           "warm_tolerance": s.warm_tolerance,
                           "eager_tolerance": s.eager_tolerance, "job_id": s.job_id,
                           "baseline": s.baseline,
                           "baseline_warm": s.baseline_warm, "repeat": s.repeat,
                           "launcher": s.launcher,
                           "allow_drift": list(s.allow_drift), "manifest_only": s.manifest_only,
                           "keys_only": s.keys_only, "store_caches": s.store_caches,
                           "store": str(self.store_path) if self.store_path else None},
            __version__, commit=self.history.commit(),
            checks=report.Streamed(self.spool.ids(), self.spool.checks))
        self.timeline.mark("created", report.created_at(data))  # the report's `created`
        data.update(no_checks=self.no_checks, baseline_gone=self.gone, exitstatus=int(exitstatus),
                    interrupted=self.interrupted, rootdir=str(self.config.rootpath),
                    writer=report.writer(self.history.commit(), self.started))
        try:
            trends = self.history.trend()
        except Exception as e:  # the trend is a view: its failure is said, the report stays
            trends = [{"error": f"reading the store's history failed: {type(e).__name__}: {e}"}]
        if trends:
            data["trend"] = trends
        described = self.history.describe_baseline()
        if described is not None:
            data["baseline"] = described
        self.timeline.mark("report")
        for worker, instants in sorted(self.ledger.timelines.items()):
            self.timeline.add(instants.items(), prefix=f"{worker} ")
        data["timeline"] = self.timeline.to_json()
        return data

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.timeline.mark("sessionfinish")
        if self.ahead:  # the session stopped early (-x, an interrupt): no more of them
            self.ahead.cancel()
        self.launcher.close()
        if self.ahead:
            self.ahead.close()
        self.timeline.add(getattr(self.launcher, "marks", ()))
        self.timeline.mark("lanes closed")
        for path in self.__dict__.get("warm_start_paths") or []:  # those that ran
            path.close()
        if self.owned_pch_dir is not None:
            remove_owned(self.owned_pch_dir)  # its owner record last: `clean` knows it
            os.environ.pop(PCH_DIR_ENV, None)
        self.history.close()
        if not self.role.reports:  # an xdist worker: the controller reports
            self._publish_timeline()
            return
        try:  # the results dir (every spooled result) goes whatever happens here
            self.ledger.collect(self.spool)
            if self.owned_lock_dir:
                remove_owned(self.owned_lock_dir)
                forget_lock_dir(self.owned_lock_dir)  # a pytester session runs in process
            self.gone = self.history.gone_checks(self.results, self._collected_files,
                                                  self._deselected)
            if exitstatus == pytest.ExitCode.INTERRUPTED:
                from pytest_compilecache import lifetime

                self.interrupted = {"by": lifetime.received or "KeyboardInterrupt"}
            self.ledger.account(self.spool, self.history.check_ids, self._deselected,
                                self.interrupted["by"] if self.interrupted else None)
            usage = exitstatus == pytest.ExitCode.USAGE_ERROR  # a bad marker: said alone
            ran = self.results or self.history.check_ids or self.ledger.collected or usage
            self.no_checks = None if ran else terminal.NO_CHECKS
            self._write_report(exitstatus)
            if self.report_problem and session.exitstatus == pytest.ExitCode.OK:
                # a CI job keyed on the exit status must not go green without its report
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
                self.report_problem += ("; the exit status is 1 although the checks passed: "
                                        "a job that reads the report must not pass without it")
        finally:
            self.ledger.close()
            from pytest_compilecache import scenarios

            for scenario in scenarios.switched_on(self.settings, self.scenarios):
                scenario.close(self)  # what its checks shared (scenarios/base.py)

    def _publish_timeline(self) -> None:
        """A worker's instants go to the report's timeline: where a sharded session's
        wall goes outside its phases (its start, collection, its interpreters' imports)."""
        worker = (getattr(self.config, "workerinput", None) or {}).get("workerid", "worker")
        try:
            self.ledger.publish("timeline", {"worker": worker,
                                             "marks": self.timeline.instants()})
        except Unpublished:
            pass  # a view for speed work: the disk's refusal is said by the results

    def _write_report(self, exitstatus: int) -> None:
        if not self.settings.report:
            return
        try:
            self.report_path, self.report_said = report.write_report_to(
                self.settings.report, self.report_dict(exitstatus), since=self.started)
        except OSError as e:  # the verdicts still reach the terminal summary
            self.report_problem = diskspace.write_problem("the JSON report",
                                                          self.settings.report, e)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.ledger.failed_report(report.nodeid, report.longreprtext or "")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.role.reports:
            terminal.write_summary(
                terminalreporter, self.results,
                verbosity=int(self.config.getoption("verbose", 0) or 0),
                no_checks=self.no_checks, gone=self.gone, manifests=self.manifest_paths,
                root=self.settings.root, report=self.report_path,
                report_problem=self.report_problem,
                report_said=[x for x in (self.report_aside,) if x] + self.report_said,
                dirty=lambda: self.history.summary_line(self.results))
