"""Controller side: the check item that replaces a marked test, the orchestration
of its two phases, and the session's collected results.

The controller never imports torch: fixtures run only in the phase children.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

from pytest_compilecache import files as fs
from pytest_compilecache import report
from pytest_compilecache.isolation import CacheRoot, phase_env, share_precompiled_headers
from pytest_compilecache.launcher import Launcher, SubprocessLauncher
from pytest_compilecache.options import Settings
from pytest_compilecache.verdict import CheckResult, error_result, judge

MARKER = "compile_cache"
PHASES = ("cold", "warm")


class CheckFailed(Exception):
    def __init__(self, result: CheckResult) -> None:
        super().__init__(result.nodeid)
        self.result = result


class CheckItem(pytest.Item):
    """Stands in for a marked test under --compile-cache-check: same node id and
    markers, but no fixtures are set up here; the phases run in child processes."""

    def __init__(self, *, original: pytest.Function, check_session: "CompileCacheSession",
                 **kw: Any) -> None:
        super().__init__(**kw)
        self._location_info = original.reportinfo()
        self._path = original.path
        self.check_session = check_session
        self.own_markers = list(original.own_markers)
        self.keywords.update(original.keywords)
        self.result: Optional[CheckResult] = None

    def runtest(self) -> None:
        self.result = self.check_session.run_check(self)
        if self.result.verdict != "pass":
            raise CheckFailed(self.result)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, CheckFailed):
            return "\n".join(report.failure_lines(excinfo.value.result))
        return super().repr_failure(excinfo)

    def reportinfo(self) -> Tuple[Any, Optional[int], str]:
        return self._location_info


class CompileCacheSession:
    """Registered as a plugin in pytest_configure; holds this session's results."""

    def __init__(self, config: pytest.Config, settings: Settings,
                 launcher: Optional[Launcher] = None) -> None:
        self.config = config
        self.settings = settings
        self.launcher: Launcher = launcher or SubprocessLauncher()
        self.results: List[CheckResult] = []
        self._shared_pch: Optional[Path] = None

    # -- collection ------------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: List[pytest.Item]) -> None:
        for i, item in enumerate(items):
            if isinstance(item, pytest.Function) and item.get_closest_marker(MARKER):
                items[i] = CheckItem.from_parent(item.parent, name=item.name, original=item,
                                                 check_session=self)

    # -- one check ---------------------------------------------------------------------
    def run_check(self, item: CheckItem) -> CheckResult:
        root = CacheRoot.create(item.nodeid, self.settings.root)
        timings: Dict[str, Optional[float]] = {}
        recs: Dict[str, Dict[str, Any]] = {}
        snaps: Dict[str, fs.Snapshot] = {}
        result: Optional[CheckResult] = None
        for phase in PHASES:
            rec, failure = self._run_phase(item, root, phase, timings)
            if failure is not None:
                result = failure
                break
            recs[phase] = rec
            if phase == "cold":
                item.ihook.pytest_compilecache_between_phases(item=item, cache_root=root.path)
            snaps[phase] = fs.snapshot(root.watched)
        if result is None:
            result = judge(item.nodeid, recs["cold"], recs["warm"], snaps["cold"],
                           fs.added(snaps["cold"], snaps["warm"]), timings, root.triton)
        if result.verdict == "pass" and not self.settings.keep:
            shutil.rmtree(root.path, ignore_errors=True)
        else:
            result.cache_root = str(root.path)
        self.results.append(result)
        return result

    def _run_phase(self, item: CheckItem, root: CacheRoot, phase: str,
                   timings: Dict[str, Optional[float]]
                   ) -> Tuple[Dict[str, Any], Optional[CheckResult]]:
        out = root.phases / f"{phase}.json"
        spec = {"phase": phase, "nodeid": item.nodeid, "out": str(out),
                "device": self.settings.device, "seed": 0,
                "tolerance": self.settings.warm_tolerance,
                "eager_tolerance": self.settings.eager_tolerance,
                "cold_outputs": str(root.phases / "cold-outputs.pt")}
        spec_path = root.phases / f"{phase}-spec.json"
        spec_path.write_text(json.dumps(spec))
        env = phase_env(os.environ, root, item.nodeid, self.settings.threads, spec_path)
        if phase == "cold":
            share_precompiled_headers(root, env, self._pch_dir())
        launched = self.launcher.run(self._child_argv(item, root, phase), env,
                                     str(self.config.invocation_params.dir),
                                     root.phases / f"{phase}.log", self.settings.timeout)
        timings[f"{phase}_process_s"] = round(launched.wall_s, 3)
        rec: Dict[str, Any] = {}
        if out.exists():
            rec = json.loads(out.read_text())
            timings[f"{phase}_s"] = (rec.get("cache") or {}).get("wall_s")
        if launched.timed_out:
            why = (f"timed out after {self.settings.timeout:.0f} s and was killed with its "
                   f"process group (raise --compile-cache-timeout)")
            return rec, error_result(item.nodeid, phase, why, launched.tail(), timings)
        if not rec:
            why = f"crashed or exited early (exit code {launched.returncode}) without a result"
            return rec, error_result(item.nodeid, phase, why, launched.tail(), timings)
        if rec.get("error"):
            return rec, error_result(item.nodeid, phase, "failed:\n" + rec["error"].rstrip(),
                                     "" if rec.get("ran") else launched.tail(), timings)
        return rec, None

    def _pch_dir(self) -> Path:
        if self._shared_pch is None:
            self._shared_pch = CacheRoot.create("shared-pch", self.settings.root).path
        return self._shared_pch

    def _child_argv(self, item: CheckItem, root: CacheRoot, phase: str) -> List[str]:
        nodeid = item.nodeid
        target = str(item.path) + nodeid[len(nodeid.split("::")[0]):]
        argv = ["-m", "pytest", target, "--rootdir", str(self.config.rootpath),
                "-p", "no:cacheprovider", "-q", "--no-header", "-s",
                "--basetemp", str(root.phases / f"basetemp-{phase}")]
        if self.config.inipath:
            argv += ["-c", str(self.config.inipath)]
        pm = self.config.pluginmanager
        if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD") or \
                pm.get_plugin("compilecache") is None:
            argv += ["-p", "pytest_compilecache.plugin"]
        if pm.hasplugin("xdist"):
            argv += ["-n", "0"]
        return argv

    # -- reporting ---------------------------------------------------------------------
    def report_dict(self) -> Dict[str, Any]:
        from pytest_compilecache import __version__

        s = self.settings
        return report.build_report(
            self.results, {"device": s.device, "timeout_s": s.timeout, "threads": s.threads,
                           "warm_tolerance": s.warm_tolerance,
                           "eager_tolerance": s.eager_tolerance}, __version__)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self) -> None:
        if self._shared_pch is not None:
            shutil.rmtree(self._shared_pch, ignore_errors=True)
        workeroutput = getattr(self.config, "workeroutput", None)
        if workeroutput is not None:  # xdist worker: the controller reports
            workeroutput["compile_cache_results"] = json.dumps(
                [r.to_json() for r in self.results])
            return
        if self.settings.report:
            report.write_report(self.settings.report, self.report_dict())

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if getattr(self.config, "workeroutput", None) is not None or not self.results:
            return
        terminalreporter.write_sep("=", "compile-cache summary")
        for line in report.summary_lines(self.results):
            terminalreporter.write_line(line)
        if self.settings.report:
            terminalreporter.write_line(f"report written to {self.settings.report}")


class XdistHooks:
    """Controller-side merge of the workers' results (registered only with xdist)."""

    def __init__(self, owner: CompileCacheSession) -> None:
        self.owner = owner

    @pytest.hookimpl
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        raw = getattr(node, "workeroutput", {}).get("compile_cache_results")
        if raw:
            self.owner.results.extend(CheckResult.from_json(d) for d in json.loads(raw))
