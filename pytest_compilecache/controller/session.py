"""Controller side: the check item that replaces a marked test, the orchestration
of its two phases, and the session's collected results.

The controller never imports torch: fixtures run only in the phase children.
"""
from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import shutil
import signal
import sys
import tempfile
import traceback
import types
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from pytest_compilecache.child import confinement
from pytest_compilecache.controller import diskspace
from pytest_compilecache import files as fs
from pytest_compilecache.history import manifest as mf
from pytest_compilecache.render import report
from pytest_compilecache.isolation import (CacheRoot, phase_env, resolve_job_id,
                                           share_precompiled_headers)
from pytest_compilecache.launch.launcher import (Launcher, PreloadedLauncher, SubprocessLauncher,
                                          pytest_child_flags)
from pytest_compilecache.controller.ledger import Ledger
from pytest_compilecache.case import marker_problem
from pytest_compilecache.options import Settings
from pytest_compilecache.controller.progress import Progress
from pytest_compilecache.paths import scenarios
from pytest_compilecache.paths.scenarios import Scenario
from pytest_compilecache.judge.verdict import OK_VERDICTS, CheckResult, error_result

MARKER = "compile_cache"
PCH_DIR_ENV = "PYTEST_COMPILECACHE_PCH_DIR"
# how running out of memory reads in a phase's error (Python, torch's CPU allocator, CUDA)
_OUT_OF_MEMORY = ("MemoryError", "can't allocate memory", "OutOfMemoryError", "out of memory")


class CheckFailed(Exception):
    def __init__(self, results: List[CheckResult]) -> None:
        super().__init__(results[0].nodeid)
        self.results = results


class _Crash:
    """Where pytest reads a failure's one-line message (`--tb=line` prints it whole)."""

    def __init__(self, message: str) -> None:
        self.message, self.path, self.lineno = message, None, None

    def __str__(self) -> str:
        return self.message


class CheckFailureRepr:
    """A failed check's report, with its first reason where pytest looks for a crash
    message: the short test summary (-rA) and JUnit's failure message show it."""

    def __init__(self, text: str, reason: str) -> None:
        self.text = text
        self.reprcrash = _Crash(reason)

    def toterminal(self, tw: Any) -> None:
        for line in self.text.splitlines():
            tw.line(line)

    def __str__(self) -> str:
        return self.text


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
        self.results: List[CheckResult] = []

    def runtest(self) -> None:
        self.results = self.check_session.run_check(self)
        for r in self.results:  # --junitxml shows them
            self.user_properties.extend(junit_properties(r))
        failed = [r for r in self.results if r.verdict not in OK_VERDICTS]
        if failed:
            raise CheckFailed(failed)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, CheckFailed):
            results = excinfo.value.results
            return CheckFailureRepr(
                "\n\n".join("\n".join(report.failure_lines(r)) for r in results),
                report.first_reason(results[0]))
        return super().repr_failure(excinfo)

    def reportinfo(self) -> Tuple[Any, Optional[int], str]:
        return self._location_info


def junit_properties(r: CheckResult) -> List[Tuple[str, str]]:
    """A check's verdict, layer states and timings as JUnit testcase properties."""
    p = "compile_cache." + ("" if r.via == "local" else f"{r.via}.")
    props = [(f"{p}verdict", r.verdict)]
    props += [(f"{p}{name}", lv.state) for name, lv in r.layers.items()]
    props += [(f"{p}{k}", f"{v:.3f}") for k, v in sorted(r.timings.items())
              if k in ("cold_s", "warm_s", "cold_process_s", "warm_process_s") and v is not None]
    if r.drift.get("status"):
        props.append((f"{p}drift", str(r.drift["status"])))
    return props


class CompileCacheSession:
    """Registered as a plugin in pytest_configure; holds this session's results."""

    def __init__(self, config: pytest.Config, settings: Settings,
                 launcher: Optional[Launcher] = None) -> None:
        self.config = config
        self.settings = settings
        self.launcher: Launcher = launcher or (
            PreloadedLauncher() if settings.launcher == "preloaded" else SubprocessLauncher())
        self._launch_notes: List[str] = []
        self._launches: Dict[str, str] = {}
        self._said_dropped = False
        self.results: List[CheckResult] = []
        self.owned_pch_dir: Optional[Path] = None  # made by this controller; removed at the end
        self.pch_path: Optional[str] = None  # the session's shared precompiled-header dir
        self.lock_path: Optional[str] = None  # the session's slot-lock dir
        self._commit: Optional[Dict[str, Any]] = None
        self._baseline: Any = None  # baseline.Baseline, built on first use
        self._check_ids: List[str] = []
        self.manifest_paths: set = set()
        self.started = report.now()
        self._deselected: set = set()
        self._pool: Any = None  # gpus.SlotPool, built on first use
        self.owned_lock_dir: Optional[str] = None  # made by this controller; removed at the end
        self._leases: List[Dict[str, Any]] = []
        self._cold_device: Optional[str] = None
        self._collected_files: set = set()
        self._locations: Dict[str, Dict[str, Any]] = {}  # node id -> test file and def line
        self.gone: List[str] = []
        self.interrupted: Optional[Dict[str, str]] = None
        self.no_checks: Optional[str] = None  # why nothing was checked, at the end
        self.report_problem: Optional[str] = None  # why the report could not be written
        self.report_said: List[str] = []  # what writing it replaced (a symlink, a mode)
        self.ledger = Ledger(None)  # the controller's gets its results dir in configure
        self.progress = Progress()  # shows nothing until the session starts on a terminal

    # -- collection ------------------------------------------------------------------
    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: List[pytest.Item]) -> None:
        """Last: a conftest's own implementation (the usual place to mark tests) and
        `-k`/`-m` have run, so the markers it added are seen."""
        for i, item in enumerate(items):
            marker = item.get_closest_marker(MARKER)
            if isinstance(item, pytest.Function) and marker and item.parent is not None:
                wrong = marker_problem(marker.args, marker.kwargs)
                if wrong:
                    raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{MARKER}(...): {wrong}")
                items[i] = CheckItem.from_parent(item.parent, name=item.name, original=item,
                                                 check_session=self)
        if self.settings.shard:
            from pytest_compilecache.render import shard

            index, count = self.settings.shard
            times = shard.times_from_report(self.settings.shard_times) \
                if self.settings.shard_times else None
            checks = [i.nodeid for i in items if isinstance(i, CheckItem)]
            mine = shard.select(checks, index, count, times)
            _deselect(config, items, lambda i: not isinstance(i, CheckItem) or i.nodeid in mine)
        if self.settings.select:  # a recording session runs only the checks it was given
            wanted = set(json.loads(Path(self.settings.select).read_text()))
            _deselect(config, items, lambda i: i.nodeid in wanted)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """The preloaded interpreters import torch while this process collects (not in
        an xdist controller, which runs no phase)."""
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None and not hasattr(self.config, "workerinput"):
            out = getattr(getattr(reporter, "_tw", None), "_file", None)
            capman = self.config.pluginmanager.get_plugin("capturemanager")
            self.progress = Progress(reporter, int(self.config.getoption("verbose", 0) or 0),
                                     live=bool(getattr(out, "isatty", lambda: False)())
                                     and os.environ.get("TERM") != "dumb",
                                     uncaptured=capman.global_and_fixture_disabled
                                     if capman is not None else contextlib.nullcontext)
        if getattr(self.config.option, "collectonly", False) or (
                getattr(self.config.option, "numprocesses", None)
                and not hasattr(self.config, "workerinput")):
            return  # nothing runs a phase here
        placeholder = Path(os.devnull)  # each interpreter has cache dirs of its own
        root = types.SimpleNamespace(inductor=placeholder, triton=placeholder, tmp=placeholder)
        env = phase_env(os.environ, root, self.settings.threads, placeholder)  # type: ignore[arg-type]
        self.launcher.start(env, str(self.config.invocation_params.dir))

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._check_ids = [i.nodeid for i in session.items if isinstance(i, CheckItem)]
        self._locations = {i.nodeid: {"file": i.location[0], "line": (i.location[1] or 0) + 1}
                           for i in session.items if isinstance(i, CheckItem)}
        self._collected_files = {i.nodeid.split("::")[0] for i in session.items}
        if getattr(self.config, "workerinput", None) is not None:  # the controller collects nothing
            self.ledger.publish("collected", {"nodeids": self._check_ids})
        if self._check_ids:  # what collecting the test modules imported, the phases import
            from pytest_compilecache.launch.libraries import installed_libraries

            self.launcher.preload(installed_libraries(sys.modules))

    def pytest_deselected(self, items: List[pytest.Item]) -> None:
        self._deselected.update(i.nodeid for i in items)

    def _gone_checks(self) -> List[str]:
        """Checks the baseline has, in files this session collected, that no longer exist."""
        if not self.settings.baseline or self.settings.baseline_warm or not self.results \
                or self.store_path is None:
            return []
        from pytest_compilecache.history.store import ManifestStore

        try:
            sha = self.baseline().commit["sha"]
        except Exception:  # no repository: nothing was compared, nothing is gone
            return []
        r = next((r for r in self.results if r.versions), None)
        if r is None:
            return []
        env = mf.environment(r.versions, r.device, r.device_name)
        base = ManifestStore(self.store_path).load(mf.environment_id(env), sha) or {}
        ran = {x.nodeid for x in self.results}
        return sorted(n for n in base.get("checks", {}) if n.split("::")[0] in self._collected_files
                      and n not in ran and n not in self._deselected)

    # -- one check ---------------------------------------------------------------------
    def run_check(self, item: CheckItem) -> List[CheckResult]:
        """One result per scenario (warm-start path). Every check ends in the results,
        whatever happens on this side: an exception here is an `error` naming the
        controller, never a check missing from the report."""
        if getattr(self.config, "workerinput", None) is not None:
            self.ledger.publish("started", {"nodeid": item.nodeid})
        return [self._run_scenario(item, scenario) for scenario in self.scenarios]

    def _run_scenario(self, item: CheckItem, scenario: Scenario) -> CheckResult:
        roots: List[CacheRoot] = []
        try:
            return self._run_check(item, scenario, roots)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: nothing in these roots is worth keeping
            if not self.settings.keep:
                for root in roots:
                    shutil.rmtree(root.path, ignore_errors=True)
            raise
        except Exception as e:
            # a write the machine refused (a full disk, an unwritable root) is the
            # environment's: named with its path, not blamed on the plugin
            written = isinstance(e, OSError) and e.errno in (*diskspace.FULL_ERRNOS, errno.EACCES,
                                                            errno.EPERM, errno.EROFS)
            if isinstance(e, OSError) and written:
                why = diskspace.write_problem("this check's files", e.filename or "its cache root",
                                              e) + "\n"
            else:
                why = ("pytest-compilecache failed in the controller while running this check "
                       "(an error in the plugin or its settings, not in the model):\n")
            result = CheckResult(nodeid=item.nodeid, verdict="error", via=scenario.via,
                                 error=why + traceback.format_exc(limit=-3 if written else None),
                                 cache_root=str(roots[0].path) if roots else None)
            self._add(result)
            return result

    def _run_check(self, item: CheckItem, scenario: Scenario, roots: List[CacheRoot]
                   ) -> CheckResult:
        s = self.settings
        root = CacheRoot.create(item.nodeid, s.root)
        roots.append(root)
        self._leases, self._cold_device, self._launch_notes = [], None, []
        self._launches = {}
        timings: Dict[str, Optional[float]] = {}
        recs: Dict[str, Dict[str, Any]] = {}
        snaps: Dict[str, fs.Snapshot] = {}
        damage: List[str] = []  # the first phase's files changed before the next ran
        logs: Dict[str, Path] = {}
        result: Optional[CheckResult] = None
        for i, plan in enumerate(scenario.phases):
            phase = plan.name
            try:
                tree = self.baseline().tree() if plan.at_baseline else None
            except Exception as e:  # git problems: this check errors, the session goes on
                result = error_result(item.nodeid, phase, f"could not check out the baseline: {e}",
                                      "", timings)
                break
            if tree is not None and not (tree / item.nodeid.split("::")[0]).exists():
                result = error_result(item.nodeid, phase, f"does not exist at the baseline "
                                      f"{self.baseline().label}: nothing to deploy from", "", timings)
                break
            where = root
            if plan.fresh_root:  # the artifact travels, the directories don't
                where = CacheRoot.create(f"{item.nodeid}-{scenario.via}", s.root)
                roots.append(where)
            extra = {"artifact": plan.artifact, "artifact_path": str(root.phases / scenario.artifact_file),
                     "watched": {k: str(v) for k, v in where.watched.items()},
                     "cold_outputs": str(root.phases / "cold-outputs.pt"), "via": scenario.via} \
                if plan.artifact else {}
            if plan.keeps_outputs:
                extra["save_outputs"] = str(root.phases / f"{phase}-outputs.pt")
            if plan.compare_with:
                extra["compare_outputs"] = str(root.phases / f"{plan.compare_with}-outputs.pt")
            rec, failure = self._run_phase(item, where, phase, timings, tree=tree, extra=extra,
                                           env_extra=scenario.phase_env(plan))
            if failure is not None:
                result = scenario.failed(phase, rec, failure)
                if damage:  # the warm run's crash follows from the damaged cache
                    result.verdict = "fail"
                break
            # the first phase, or one on a fresh root that loads no artifact, starts cold
            cold = i == 0 or (plan.fresh_root and plan.artifact != "load")
            hits = confinement.foreign_hits(rec) if cold else []
            if hits:  # a phase on an empty root that hit: it was never cold
                result = scenario.failed(phase, rec, error_result(
                    item.nodeid, phase, confinement.not_cold(hits), "", timings))
                break
            recs[phase] = rec
            logs[phase] = where.phases / f"{phase}.log"
            snaps[phase] = fs.snapshot(where.watched)
            if not scenario.goes_on(rec):
                break
            if i == 0:  # what the first phase built, before anything reads it
                item.ihook.pytest_compilecache_between_phases(item=item, cache_root=root.path)
                damage = fs.damaged(snaps[phase], fs.snapshot(root.watched))
        if result is None:
            result = scenario.judge(item.nodeid, recs, snaps, timings, root.triton)
            _blame_full_disk(result, recs, logs)
        result.via = scenario.via
        if "cold" in recs and scenario.records_keys:
            entry = mf.check_entry(recs["cold"].get("cache") or {}, result.verdict)
            try:
                self._store_entry(item.nodeid, recs["cold"], entry, result)
            except OSError as e:  # a full store: this check errors, naming it; the session goes on
                result.problems.insert(0, diskspace.write_problem(
                    "the key manifest", self.store_path, e) + f" (the check itself: {result.verdict})")
                result.verdict = "error"
            if s.repeat:
                self._repeat(item, entry, result, timings)
            if s.baseline:
                self._compare_with_baseline(item.nodeid, recs["cold"], entry, result)
        if damage:
            result.problems.insert(0, (
                f"cache damaged between build and deploy: {len(damage)} file(s) the cold run "
                f"wrote changed before the warm run read them (a full disk, a concurrent wipe, "
                f"an interrupted copy?): " + "; ".join(damage[:5])
                + (f" (+{len(damage) - 5} more)" if len(damage) > 5 else "")))
        result.leases = list(self._leases)
        result.notes.extend(self._launch_notes)
        result.launch = dict(self._launches)
        if result.problems and result.verdict in OK_VERDICTS:
            result.verdict = "fail"
        if result.verdict in OK_VERDICTS and not s.keep:
            for r in roots:
                shutil.rmtree(r.path, ignore_errors=True)
        else:
            result.cache_root = str(root.path)
            if len(roots) > 1:
                result.notes.append("warm cache root kept: " + ", ".join(str(r.path) for r in roots[1:]))
        self._add(result)
        return result

    @functools.cached_property
    def scenarios(self) -> List[Scenario]:
        return scenarios.for_settings(self.settings)

    def _add(self, result: CheckResult) -> None:
        """Keep a check's result; an xdist worker also hands it to the controller at
        once (a worker that dies later, or an interrupted session, loses nothing)."""
        result.location = self._locations.get(result.nodeid, {})
        self.results.append(result)
        if getattr(self.config, "workerinput", None) is not None:
            self.ledger.publish("result", result.to_json())

    # -- manifests, baseline, repeat ---------------------------------------------------
    @functools.cached_property
    def store_path(self) -> Optional[Path]:
        """Resolved on first use: finding the git root is no work for pytest start-up."""
        from pytest_compilecache.history.store import DEFAULT_DIR

        chosen = self.settings.store
        if chosen and chosen.lower() == "none":
            return None
        if chosen:
            return Path(self.config.invocation_params.dir) / chosen
        from pytest_compilecache.history import git as history

        return (history.repo_root(self.config.rootpath) or self.config.rootpath) / DEFAULT_DIR

    def commit(self) -> Dict[str, Any]:
        if self._commit is None:
            from pytest_compilecache.history import git as history

            self._commit = history.commit_info(self.config.rootpath)
        return self._commit

    def _store_entry(self, nodeid: str, cold: Dict[str, Any], entry: Dict[str, Any],
                     result: CheckResult) -> None:
        if self.store_path is None or not entry["graphs"]:
            return
        from pytest_compilecache.history.store import ManifestStore

        store = ManifestStore(self.store_path)
        self.manifest_paths.add(store.merge(self.commit(), mf.environment_of(cold), {nodeid: entry}))
        for damaged in store.replaced_damaged:
            why = store.damage.get(damaged, "damaged, or of a newer schema")
            print(f"pytest-compilecache: warning: the stored key manifest {damaged} was "
                  f"unreadable ({why}) and is recorded anew; the entries of its other checks "
                  f"are lost", file=sys.stderr, flush=True)
            result.notes.append(f"the stored key manifest {damaged} was unreadable ({why}) and "
                                f"was recorded anew (its other checks' entries were lost)")

    def baseline(self) -> Any:
        if self._baseline is None:
            from pytest_compilecache.history import git as history
            from pytest_compilecache.history.baseline import Baseline
            from pytest_compilecache.history.store import DEFAULT_DIR, ManifestStore

            repo = history.require_root(self.config.rootpath)
            store = ManifestStore(self.store_path or repo / DEFAULT_DIR)
            s = self.settings
            options = [f"--compile-cache-device={s.device}", f"--compile-cache-threads={s.threads}",
                       f"--compile-cache-timeout={s.timeout}"]
            self._baseline = Baseline(
                repo, s.baseline or "", store, options,
                Path(self.config.rootpath).resolve().relative_to(repo.resolve()),
                Path(self.config.invocation_params.dir).resolve().relative_to(repo.resolve()),
                timeout=s.timeout * 2 * (len(self._check_ids) + 1))
        return self._baseline

    def _compare_with_baseline(self, nodeid: str, cold: Dict[str, Any], entry: Dict[str, Any],
                               result: CheckResult) -> None:
        try:
            base = self.baseline()
            with self.progress.step(f"baseline keys at {self.settings.baseline}"):
                found = base.manifest(mf.environment_of(cold), self._check_ids or [nodeid])
        except Exception as e:
            result.problems.append(f"baseline {self.settings.baseline}: {e}")
            return
        old = (found or {}).get("checks", {}).get(nodeid)
        cmp = mf.compare_check(old, entry, self.settings.allow_drift)
        result.drift = {"base": base.label, "base_sha": base.commit["sha"], **cmp}
        if old is None:
            logs = ", ".join(str(p) for p in base.logs)
            result.notes.append(f"no key manifest at the baseline {base.label}: the check is new "
                                f"there or its recording failed" + (f" (log: {logs})" if logs else ""))
        elif cmp["status"] == "drifted":
            changed = mf.changed_components(cmp, include_accepted=False)
            named = [c for c in changed if c not in ("graph added", "graph removed",
                                                       "key changed")]
            accept = (f"; if the change is meant, accept it with "
                      f"--compile-cache-allow-drift='{','.join(named)}'" if named else "")
            result.problems.append(f"cache keys drifted against {base.label}: "
                                   + ", ".join(changed[:8]) + accept)

    def _repeat(self, item: CheckItem, entry: Dict[str, Any], result: CheckResult,
                timings: Dict[str, Optional[float]]) -> None:
        """A second cold run, relocated: same commit, so any key difference is nondeterminism."""
        root = CacheRoot.create(item.nodeid + "-repeat", self.settings.root)
        cwd = root.path / "cwd"
        cwd.mkdir(mode=0o700)
        try:
            rec, failure = self._run_phase(item, root, "repeat", timings, cwd=cwd)
            hits = confinement.foreign_hits(rec) if failure is None else []
            if failure is not None or hits:
                result.problems.append(f"repeat cold run: {failure.error}" if failure is not None
                                       else "repeat cold run " + confinement.not_cold(hits))
                return
            again = mf.check_entry(rec.get("cache") or {}, result.verdict)
            cmp = mf.compare_check(entry, again)
            same = cmp["status"] in ("unchanged", "no keys")
            result.repeat = {"status": "stable" if same else "nondeterministic",
                             "graphs": cmp["graphs"]}
            if not same:
                comps = mf.changed_components(cmp)
                result.problems.append("nondeterministic cache key: two cold runs of the same "
                                       "commit computed different keys; differing: "
                                       + ", ".join(comps[:8]))
        finally:
            if not self.settings.keep:
                shutil.rmtree(root.path, ignore_errors=True)

    def _run_phase(self, item: CheckItem, root: CacheRoot, phase: str,
                   timings: Dict[str, Optional[float]], tree: Optional[Path] = None,
                   cwd: Optional[Path] = None, extra: Optional[Dict[str, Any]] = None,
                   env_extra: Optional[Dict[str, str]] = None
                   ) -> Tuple[Dict[str, Any], Optional[CheckResult]]:
        """One child; `tree` runs it in the baseline's worktree, `cwd` elsewhere;
        `env_extra`: what the warm-start path sets (TORCH_CACHING_PRECOMPILE=1)."""
        tampered = root.tampered()
        if tampered:  # someone else's directory in its place: run nothing from it
            return {}, error_result(item.nodeid, phase, f"was not run: {tampered}", "", timings)
        out = root.phases / f"{phase}.json"
        spec = {"phase": phase, "nodeid": item.nodeid, "out": str(out),
                "device": self.settings.device, "seed": 0,
                "tolerance": self.settings.warm_tolerance,
                "eager_tolerance": self.settings.eager_tolerance,
                "cold_outputs": str(root.phases / "cold-outputs.pt"),
                "launcher_pid": os.getpid(), **(extra or {})}
        job, spec["job_id_source"] = resolve_job_id(self.settings.job_id, item.nodeid, os.environ)
        spec_path = root.phases / f"{phase}-spec.json"
        env = phase_env(os.environ, root, self.settings.threads, spec_path, job)
        env.update(env_extra or {})
        invocation = Path(self.config.invocation_params.dir)
        if phase != "warm":
            share_precompiled_headers(root, env, self._pch_dir())
        if tree is not None:
            from pytest_compilecache.history.baseline import tree_env

            env = tree_env(env, tree)
            cwd = tree
        elif cwd is not None:  # `python -m pytest` had the invocation dir on sys.path
            env["PYTHONPATH"] = os.pathsep.join(
                [str(invocation)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        # what the child keeps private whatever the test's code does (confinement.py)
        spec["root"], spec["private"] = str(root.path), confinement.private_settings(env)
        spec_path.write_text(json.dumps(spec))
        try:
            with self._lease(item.nodeid, phase, env, spec, spec_path) as lease, \
                    self.progress.step(f"{phase} phase" + (" (in the baseline's worktree)"
                                                           if tree is not None else "")):
                # a check's cold phase and its others fork from different interpreters
                launched = self.launcher.run(self._child_argv(item, root, phase, tree), env,
                                             str(cwd or invocation),
                                             root.phases / f"{phase}.log", self.settings.timeout,
                                             lane=0 if phase == "cold" else 1)
        except Exception as e:  # a lease timeout or an unusable lock dir: this check errors
            from pytest_compilecache.controller.gpus import LeaseTimeout

            if not isinstance(e, (LeaseTimeout, OSError)):
                raise
            return {}, error_result(item.nodeid, phase, str(e), "", timings)
        self._leases.append({"phase": phase, **lease.to_json()})
        self._launches[phase] = "forked" if launched.forked else "fresh"
        dropped = getattr(self.launcher, "dropped", None)
        if dropped and not self._said_dropped:
            self._said_dropped = True
            self._launch_notes.append("torch's compile stack and the test modules' installed "
                                      f"libraries are not preloaded (torch is): {dropped}")
        if launched.fresh_because and self.settings.launcher == "preloaded":
            self._launch_notes.append(f"the {phase} phase ran in a fresh interpreter, not forked "
                                      f"from a preloaded one: {launched.fresh_because}")
        if launched.leftovers:  # ended, and said: a phase's daemon never outlives it
            from pytest_compilecache.launch.descendants import leftovers_note

            self._launch_notes.append(leftovers_note(phase, launched.leftovers))
        timings[f"{phase}_process_s"] = round(launched.wall_s, 3)
        timings[f"{phase}_peak_rss_mb"] = launched.peak_rss_mb
        memory = f"peak resident memory {launched.peak_rss_mb:.0f} MB" \
            if launched.peak_rss_mb is not None else "peak resident memory unknown"
        rec: Dict[str, Any] = {}
        if out.exists():
            rec = json.loads(out.read_text())
            timings[f"{phase}_s"] = (rec.get("cache") or {}).get("wall_s")
            for stage, secs in launched.stages(rec.get("marks") or {}).items():
                timings[f"{phase}_{stage}_s"] = secs
        if launched.timed_out:
            why = (f"timed out after {self.settings.timeout:.0f} s and was killed with its "
                   f"process group (raise --compile-cache-timeout)")
            return rec, error_result(item.nodeid, phase, why, launched.tail(), timings)
        if not rec or rec.get("error"):  # a full disk is named before anything it caused
            full = diskspace.out_of_space(phase, root.path, root.phases / f"{phase}.log",
                                          (rec.get("error") or "") + "\n" + launched.tail())
            if full:
                return rec, error_result(item.nodeid, phase, full, launched.tail(), timings)
        if not rec:
            code = launched.returncode
            if code == -signal.SIGKILL:
                why = (f"was killed with SIGKILL without a result: out of memory? (the kernel's "
                       f"OOM killer sends SIGKILL; {memory})")
            else:
                why = f"crashed or exited early (exit code {code}) without a result ({memory})"
            return rec, error_result(item.nodeid, phase, why, launched.tail(), timings)
        self._launch_notes.extend(n for n in rec.get("reclaimed") or []
                                  if n not in self._launch_notes)
        if rec.get("escaped"):
            return rec, error_result(item.nodeid, phase, confinement.escaped(rec["escaped"]), "",
                                     timings)
        if rec.get("error"):
            text = rec["error"].rstrip()
            oom = next((m for m in _OUT_OF_MEMORY if m in text or m in launched.tail()), None)
            why = (f"ran out of memory ({oom}; {memory}):\n" if oom else "failed:\n") + text
            return rec, error_result(item.nodeid, phase, why,
                                     "" if rec.get("ran") else launched.tail(), timings)
        return rec, None

    # -- device slots --------------------------------------------------------------------
    def slot_pool(self) -> Any:
        if self._pool is None:
            from pytest_compilecache.controller import gpus

            s = self.settings
            devices: List[str] = []
            if s.device != "cpu":
                devices = gpus.parse_gpus(s.gpus) or gpus.visible_gpus()
            slots = (gpus.slots_for(devices, s.jobs_per_gpu) if devices
                     else gpus.cpu_slots(os.cpu_count() or 1, s.threads))
            self._pool = gpus.SlotPool(Path(self.lock_path or lock_dir(s.lock_dir)), slots,
                                       s.lease_timeout,
                                       say=lambda m: print(f"pytest-compilecache: {m}",
                                                           file=sys.stderr, flush=True))
        return self._pool

    @contextlib.contextmanager
    def _lease(self, nodeid: str, phase: str, env: Dict[str, str], spec: Dict[str, Any],
               spec_path: Path) -> Iterator[Any]:
        """Hold a slot for one phase and point the child at its GPU. With
        --compile-cache-warm-on-other-gpu both phases see (cold GPU, next GPU), and warm
        runs on the second."""
        pool = self.slot_pool()
        devices = list(dict.fromkeys(sl.device for sl in pool.slots))
        other_gpu = self.settings.warm_on_other_gpu and len(devices) > 1

        def cold_and_next(cold: str) -> List[str]:
            return [cold, devices[(devices.index(cold) + 1) % len(devices)]]

        pair = cold_and_next(self._cold_device) if other_gpu and phase == "warm" \
            and self._cold_device is not None and self._cold_device in devices else None
        with pool.lease(f"{nodeid} [{phase}]", device=pair[1] if pair else None) as lease:
            dev = lease.slot.device
            if phase == "cold":
                self._cold_device = dev
                if other_gpu:
                    pair = cold_and_next(dev)
            if pair is not None:
                env["CUDA_VISIBLE_DEVICES"] = ",".join(pair)
                spec["cuda_index"] = pair.index(dev)
                spec_path.write_text(json.dumps(spec))
            else:
                env.update(lease.slot.env())
            yield lease

    def _pch_dir(self) -> Path:
        """The controller's shared precompiled-header dir (xdist workers are handed it)."""
        return Path(self.pch_path or self.open_pch_dir())

    def open_pch_dir(self) -> Path:
        """Made by the controller before xdist starts its workers, removed by it at the
        end: a worker that a SIGTERM ends early leaves nothing behind. The environment
        carries it to recording sessions; this process keeps its own copy of the path
        (a test may clear the environment)."""
        if self.pch_path is None:
            self.pch_path = os.environ.get(PCH_DIR_ENV)
        if self.pch_path is None:
            self.owned_pch_dir = CacheRoot.create("shared-pch", self.settings.root).path
            self.pch_path = str(self.owned_pch_dir)
        os.environ[PCH_DIR_ENV] = self.pch_path
        return Path(self.pch_path)

    # -- xdist: what a worker is handed, not read from its environment ---------------
    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["compilecache_dirs"] = {
            "results": self.ledger.results_dir, "locks": self.lock_path, "pch": self.pch_path}

    def adopt_dirs(self, workerinput: Dict[str, Any]) -> None:
        """In an xdist worker: the controller's results, lock and header dirs."""
        from pytest_compilecache.controller.gpus import LOCK_DIR_ENV
        from pytest_compilecache.controller.ledger import RESULTS_DIR_ENV

        dirs = workerinput.get("compilecache_dirs") or {}
        self.ledger = Ledger(dirs.get("results") or os.environ.get(RESULTS_DIR_ENV))
        self.lock_path = dirs.get("locks") or os.environ.get(LOCK_DIR_ENV)
        self.pch_path = dirs.get("pch") or os.environ.get(PCH_DIR_ENV)

    def _child_argv(self, item: CheckItem, root: CacheRoot, phase: str,
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
    def report_dict(self) -> Dict[str, Any]:
        from pytest_compilecache import __version__

        s = self.settings
        return report.build_report(
            self.results, {"device": s.device, "timeout_s": s.timeout, "threads": s.threads,
                           "warm_tolerance": s.warm_tolerance,
                           "eager_tolerance": s.eager_tolerance, "job_id": s.job_id,
                           "baseline": s.baseline,
                           "baseline_warm": s.baseline_warm, "repeat": s.repeat,
                           "launcher": s.launcher,
                           "allow_drift": list(s.allow_drift), "manifest_only": s.manifest_only,
                           "store": str(self.store_path) if self.store_path else None},
            __version__, commit=self.commit())

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.launcher.close()
        for scenario in self.__dict__.get("scenarios") or []:  # those that ran
            scenario.close()
        if self.owned_pch_dir is not None:
            shutil.rmtree(self.owned_pch_dir, ignore_errors=True)
            os.environ.pop(PCH_DIR_ENV, None)
        if self._baseline is not None:
            self._baseline.close()
        if getattr(self.config, "workerinput", None) is not None:
            return  # an xdist worker: the controller reports
        self.ledger.collect(self.results)
        if self.owned_lock_dir:
            shutil.rmtree(self.owned_lock_dir, ignore_errors=True)
        self.gone = self._gone_checks()
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            from pytest_compilecache import lifetime

            self.interrupted = {"by": lifetime.received or "KeyboardInterrupt"}
        self.ledger.account(self.results, self._check_ids, self._deselected,
                            self.interrupted["by"] if self.interrupted else None)
        self.no_checks = None if (self.results or self._check_ids or self.ledger.collected) \
            else NO_CHECKS
        if self.settings.report:
            data = self.report_dict()
            data["no_checks"] = self.no_checks
            data["baseline_gone"] = self.gone
            data["exitstatus"] = int(exitstatus)
            data["interrupted"] = self.interrupted
            data["rootdir"] = str(self.config.rootpath)
            if self._baseline is not None:
                data["baseline"] = self._baseline.describe()
            try:
                self.report_said = report.write_report(self.settings.report, data,
                                                       since=self.started)
            except OSError as e:  # the verdicts still reach the terminal summary
                self.report_problem = diskspace.write_problem("the JSON report",
                                                              self.settings.report, e)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.ledger.failed_report(report.nodeid, report.longreprtext or "")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if getattr(self.config, "workerinput", None) is not None:
            return
        if self.no_checks:
            terminalreporter.write_sep("=", "compile-cache: no check ran", yellow=True, bold=True)
            terminalreporter.write_line(self.no_checks, yellow=True)
        if not self.results:
            if self.report_problem:
                terminalreporter.write_line(f"report NOT written: {self.report_problem}",
                                            red=True, bold=True)
            return
        terminalreporter.write_sep("=", "compile-cache summary")
        for line in report.summary_lines(self.results):
            terminalreporter.write_line(line)
        for nodeid in self.gone:
            terminalreporter.write_line(f"  gone      {nodeid} (in the baseline, not here)")
        for path in sorted(self.manifest_paths):
            terminalreporter.write_line(f"key manifest: {path}")
        kept = [r for r in self.results if r.cache_root]
        if kept:
            where = f" --root {self.settings.root}" if self.settings.root else ""
            terminalreporter.write_line(f"{len(kept)} cache root(s) kept for inspection; "
                                        f"`pytest-compilecache clean{where}` removes them "
                                        f"once they are an hour old (--min-age 0: now)")
        if self.report_problem:
            terminalreporter.write_line(f"report NOT written: {self.report_problem}", red=True,
                                        bold=True)
        elif self.settings.report:
            terminalreporter.write_line(f"report written to {self.settings.report}")
            for line in self.report_said:
                terminalreporter.write_line(f"  note: {line}", yellow=True)


NO_CHECKS = ("--compile-cache-check selected no check: no collected test carries the "
             "compile_cache marker (mark a test or its module with "
             "@pytest.mark.compile_cache, in the file or in a conftest's "
             "pytest_collection_modifyitems; -k, -m and --compile-cache-shard can leave none)")


def _blame_full_disk(result: CheckResult, recs: Dict[str, Dict[str, Any]],
                     logs: Dict[str, Path]) -> None:
    """A check that did not pass because a phase could not save its caches (a disk
    briefly full: torch logs the write error and goes on, and the next phase rebuilds
    what is missing) is an `error` naming that, not a miss of the model's."""
    if result.verdict in OK_VERDICTS:
        return
    for phase, log in logs.items():
        lines = diskspace.full_lines(log)
        errors = ((recs[phase].get("cache") or {}).get("counters") or {}).get(
            "inductor", {}).get("fxgraph_cache_write_error", 0)
        if lines or errors:
            said = lines[0] if lines else f"torch counted {errors} FX graph write error(s)"
            result.problems.insert(0, (
                f"the {phase} phase could not save all of its caches ({said}; log: {log}): a "
                f"full disk or a write the filesystem refused, an environment problem, not the "
                f"model; what follows is its consequence, not a verdict on the model"))
            result.verdict = "error"
            return


def _deselect(config: pytest.Config, items: List[pytest.Item], keep: Any) -> None:
    drop = [i for i in items if not keep(i)]
    if drop:
        items[:] = [i for i in items if keep(i)]
        config.hook.pytest_deselected(items=drop)


def lock_dir(chosen: Optional[str]) -> str:
    """The slot-lock directory: the option, else the one the controller made for this
    session (inherited by xdist workers and recording sessions through the env)."""
    from pytest_compilecache.controller.gpus import LOCK_DIR_ENV, shared_lock_dir

    if chosen:
        return str(shared_lock_dir(Path(chosen)))
    if not os.environ.get(LOCK_DIR_ENV):
        os.environ[LOCK_DIR_ENV] = tempfile.mkdtemp(prefix="pytest-compilecache-locks-")
    return os.environ[LOCK_DIR_ENV]
