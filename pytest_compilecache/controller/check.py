"""The run of one check under one warm-start path: its phases in their private cache
roots, the rule of the path over their records, then what the session keeps of it (keys,
the repeat run, the baseline's drift). Everything one check holds while it runs (roots,
records, leases, launches, notes) lives here, none of it on the session.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Protocol, Tuple

from pytest_compilecache import adopted
from pytest_compilecache import files as fs
from pytest_compilecache.controller import diskspace, stored
from pytest_compilecache.controller.item import CheckItem
from pytest_compilecache.controller.keyhistory import KeyHistory
from pytest_compilecache.controller.lease import phase_lease
from pytest_compilecache.controller.limits import PhaseLimit
from pytest_compilecache.controller.outcome import blame_full_disk, phase_outcome
from pytest_compilecache.controller.repeat import repeat_cold
from pytest_compilecache.history import manifest as mf, trend
from pytest_compilecache.isolation import (CacheRoot, phase_env, private_settings,
                                           resolve_job_id, share_precompiled_headers)
from pytest_compilecache.judge import accepted, confinement
from pytest_compilecache.judge.reseeded import drew_in_the_test, unjudged
from pytest_compilecache.model import OK_VERDICTS, CheckResult, error_result
from pytest_compilecache.wire import WIRE_VERSION, PhaseRecord, PhaseSpec
from pytest_compilecache.settings import Settings
from pytest_compilecache.paths.base import PathUnavailable, PhasePlan, WarmStartPath

Timings = Dict[str, Optional[float]]


class Shared(Protocol):
    """What the checks of a session share (controller/session.py holds it)."""
    config: Any
    settings: Settings
    launcher: Any
    progress: Any
    history: KeyHistory
    said_dropped: bool
    timeline: Any  # timeline.Timeline

    def baseline(self) -> Any: ...

    def slot_pool(self) -> Any: ...

    def pch_dir(self) -> Path: ...

    def child_argv(self, item: CheckItem, root: CacheRoot, phase: str,
                   tree: Optional[Path] = None) -> List[str]: ...

    def shared_root(self, nodeid: str) -> Any: ...


class CheckRun:
    """One check, one path. `run()` always returns a result: an exception on this side
    is an `error` naming the controller (or the machine, for a refused write), never a
    check missing from the report."""
    lease = phase_lease  # a phase's device slot, held while it runs (ranks hold theirs)

    def __init__(self, session: Shared, item: CheckItem,
                 path: WarmStartPath) -> None:
        self.session, self.settings, self.item, self.path = session, session.settings, item, path
        self.roots: List[CacheRoot] = []
        self.timings: Timings = {}
        self.recs: Dict[str, PhaseRecord] = {}  # typed once, where they entered (outcome.py)
        self.snaps: Dict[str, fs.Snapshot] = {}
        self.logs: Dict[str, Path] = {}
        self.damage: List[str] = []  # the first phase's files changed before the next ran
        self.leases: List[Dict[str, Any]] = []
        self.launches: Dict[str, str] = {}  # phase -> forked | fresh
        self.notes: List[str] = []  # what launching the phases said
        self.cold_device: Optional[str] = None
        self.shared_root: Optional[Path] = None  # the variants' shared cache, if it took a turn
        self.phase_now: Optional[str] = None  # the phase running or last asked for
        # the preloaded interpreter its cold phase forks from; its others fork from the
        # next (controller/ahead.py gives the runs it starts side by side one each)
        self.lane = 0
        # what its phases' environments start from: the controller's (ahead.py hands the
        # runs it starts a copy: pytest's own thread changes PYTEST_CURRENT_TEST meanwhile)
        self.environ: Mapping[str, str] = os.environ

    def run(self, ran: Optional[Callable[[], CheckResult]] = None) -> CheckResult:
        """`ran`: the wait for its phases, where they were started ahead (ahead.py)."""
        try:
            return self._conclude(ran() if ran is not None else self.phases())
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: nothing in these roots is worth keeping
            if not self.settings.keep:
                for root in self.roots:
                    root.remove()
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
            return CheckResult(nodeid=self.item.nodeid, verdict="error", via=self.path.via,
                               error=why + traceback.format_exc(limit=-3 if written else None),
                               cache_root=str(self.roots[0].path) if self.roots else None)

    def interrupted(self) -> CheckResult:
        """The check an interrupt (Ctrl-C, SIGTERM) stopped: `not run`, saying which
        phases had finished and which one was stopped (not as if nothing had run)."""
        from pytest_compilecache import lifetime

        by = lifetime.received or "KeyboardInterrupt"
        done = [f"{p} ({self.timings[f'{p}_process_s']:.1f} s)" if
                self.timings.get(f"{p}_process_s") is not None else p for p in list(self.recs)]
        what = (f"the session was interrupted ({by}) during this check's {self.phase_now} "
                f"phase" if self.phase_now else f"the session was interrupted ({by}) as this "
                                                f"check started")
        if done:
            what += (f", after its {' and '.join(done)} phase{'s' if len(done) > 1 else ''} "
                     f"had finished")
        return CheckResult(nodeid=self.item.nodeid, verdict="not run", via=self.path.via,
                           error=what + "; no verdict: run the check again", timings=self.timings)

    # -- the phases ----------------------------------------------------------------------
    def phases(self) -> CheckResult:
        """Each phase the path plans, until one fails or the path stops; then its rule."""
        nodeid, root = self.item.nodeid, CacheRoot.create(self.item.nodeid, self.settings.root)
        self.roots.append(root)
        saved_env: Optional[str] = None  # the environment the restored phase ran in
        for i, plan in enumerate(self.path.phases):
            if plan.python_seed is not None and not self._drew():
                continue  # other Python-side draws change nothing where none were made
            phase = self.phase_now = plan.name
            try:
                saved, root = stored.find(self, root) if plan.from_store else (None, root)
                tree = (self.session.baseline().tree() if plan.at_baseline and saved is None
                        else None)
            except Exception as e:  # git problems: this check errors, the session goes on
                return error_result(nodeid, phase, f"could not check out the baseline: {e}", "",
                                    self.timings)
            if tree is not None and not (tree / nodeid.split("::")[0]).exists():
                return error_result(nodeid, phase, f"does not exist at the baseline "
                                    f"{self.session.baseline().label}: nothing to deploy from", "",
                                    self.timings)
            where = root
            if plan.fresh_root:  # the artifact travels, the directories don't
                where = CacheRoot.create(f"{nodeid}-{self.path.via}", self.settings.root)
                self.roots.append(where)
            try:
                env_extra = self.path.phase_env(plan)
            except PathUnavailable as e:  # its server is gone: an error, never misses
                return error_result(nodeid, phase, f"was not run: {e}", "", self.timings)
            if saved is not None:
                rec, failure = stored.restored(self, saved, where, phase)
                saved_env = saved.env_id
            elif plan.shared_root:
                try:
                    shared = self.session.shared_root(nodeid)
                except adopted.UnsafeDir as e:  # the environment's, named: no traceback
                    return error_result(nodeid, phase, f"was not run: {e}", "", self.timings)
                if shared is None:  # no other variant of its function in the session
                    break
                from pytest_compilecache.controller.variants import take_turn

                rec, failure = take_turn(self, shared, plan, env_extra)
                where = root  # its files were moved into the check's own root
            else:
                rec, failure = self.run_phase(where, phase, tree=tree,
                                              extra=self.extra(plan, where),
                                              env_extra=env_extra)
            if (failure is not None or rec is None) and plan.python_seed is not None:
                self.notes.append(unjudged(plan.name, failure))  # other draws: no verdict
                break
            if failure is not None or rec is None:  # a phase with no record has failed
                result = self.path.failed(phase, rec or PhaseRecord(), failure or error_result(
                    nodeid, phase, "left no record", "", self.timings))
                if self.damage:  # the warm run's crash follows from the damaged cache
                    result.error_fails = True
                return result
            if saved_env is not None and saved is None:  # its caches were another's?
                other = stored.other_environment(saved_env, rec)
                if other:
                    return error_result(nodeid, phase, other, "", self.timings)
            # the first phase, or one on a fresh root that loads no artifact, starts cold
            cold = i == 0 or (plan.fresh_root and plan.artifact != "load")
            hits = confinement.foreign_hits(rec) if cold else []
            if hits:  # a phase on an empty root that hit: it was never cold
                return self.path.failed(phase, rec, error_result(
                    nodeid, phase, confinement.not_cold(hits), "", self.timings))
            self.recs[phase] = rec
            self.logs[phase] = where.phases / f"{phase}.log"
            if not plan.shared_root:  # the shared root is other variants' too
                self.snaps[phase] = fs.snapshot(where.watched)
            if not self.path.goes_on(rec):
                break
            if i == 0 and len(self.path.phases) > 1:  # what it built, before a phase reads it
                self.item.ihook.pytest_compilecache_between_phases(item=self.item,
                                                                   cache_root=root.path)
                self.damage = fs.damaged(self.snaps[phase], fs.snapshot(root.watched))
        result = self.path.judge(nodeid, self.recs, self.snaps, self.timings, root.triton)
        # an accepted cost first: a full disk blamed only for what is still a problem
        accepted.apply(result, self._accepted())
        if self.path.accepts_drift:  # the misses a drift accepted in the repo explains
            self.session.history.accept_deploy_misses(self.item.nodeid, result)
        blame_full_disk(result, self.recs, self.logs)
        self.session.timeline.mark("judged")
        return result

    def extra(self, plan: PhasePlan, where: CacheRoot) -> PhaseSpec:
        """What a phase's spec carries for its path (its artifact, the outputs it keeps)."""
        root = self.roots[0]
        extra: PhaseSpec = {
            "artifact": plan.artifact, "artifact_path": str(root.phases / self.path.artifact_file),
            "watched": {k: str(v) for k, v in where.watched.items()},
            "cold_outputs": str(root.phases / "cold-outputs.pt"), "via": self.path.via,
        } if plan.artifact else {}
        extra["path"] = self.path.name  # the child takes its side of the same path
        if plan.python_seed is not None:
            extra["python_seed"] = plan.python_seed
        if plan.keeps_outputs:
            extra["save_outputs"] = str(root.phases / f"{plan.name}-outputs.pt")
        if plan.compare_with:
            extra["compare_outputs"] = str(root.phases / f"{plan.compare_with}-outputs.pt")
        return extra

    def _drew(self) -> bool:
        """The earlier phases saw the test draw from Python's random or numpy's generator."""
        return drew_in_the_test(self.recs.values())

    # -- what the session keeps of it ------------------------------------------------------
    @staticmethod
    def timed(result: CheckResult) -> bool:
        """A check whose times say what it costs: it ran a warm phase (a recording of
        keys, cold only, or stopped early, does not)."""
        return result.timings.get("warm_s") is not None

    def _conclude(self, result: CheckResult) -> CheckResult:
        s, history = self.settings, self.session.history
        result.via = self.path.via
        cold = self.recs.get("cold")
        if cold is not None and self.path.records_keys:
            entry = mf.check_entry(cold.raw.get("cache") or {}, result.verdict)
            if self.path.keys_only:  # stopped before code generation: keyhistory.py
                entry["keys_only"] = True
            if self.timed(result):  # a recording's cold-only run is no point of the trend
                entry["run"] = trend.run_entry(result.timings.get("cold_s"),
                                               result.timings.get("warm_s"),
                                               {k: lv.state for k, lv in result.layers.items()})
            try:
                history.store_entry(self.item.nodeid, cold.raw, entry, result)
            except OSError as e:  # a full store: this check errors, naming it; the session goes on
                result.problems.insert(0, diskspace.write_problem(
                    "the key manifest", history.store_path, e)
                    + f" (the check itself: {result.verdict})")
                result.fault = True
            if s.repeat:
                repeat_cold(self, entry, result)
            if s.baseline:
                history.compare_with_baseline(self.item.nodeid, cold.raw, entry, result,
                                              self.session.progress)
        if self.damage:
            result.problems.insert(0, (
                f"cache damaged between build and deploy: {len(self.damage)} file(s) the cold "
                f"run wrote changed before the warm run read them (a full disk, a concurrent "
                f"wipe, an interrupted copy?): " + "; ".join(self.damage[:5])
                + (f" (+{len(self.damage) - 5} more)" if len(self.damage) > 5 else "")))
        if history.store_path is not None and self.timed(result):  # the next session's order
            from pytest_compilecache.history import times

            with contextlib.suppress(OSError, TimeoutError):  # it only orders: never an error
                times.record(history.store_path, self.item.nodeid, self.path.via,
                             times.process_seconds(result.timings))
        result.leases = list(self.leases)
        result.notes.extend(self.notes)
        result.launch = dict(self.launches)
        result.finalize()  # the verdict from all of it (model.CheckResult.finalize)
        if (s.store_caches and self.path.storable and self.path.via == "local"
                and result.verdict == "pass" and cold):
            stored.keep(self, cold, result)
        if not s.keep and (result.verdict in OK_VERDICTS or self._nothing_kept(result)):
            for r in self.roots:
                r.remove()
            self.session.timeline.mark("roots removed")
        else:
            result.cache_root = str(self.roots[0].path)
            if len(self.roots) > 1:
                result.notes.append("the empty roots its later phases started from, kept: "
                                    + ", ".join(str(r.path) for r in self.roots[1:]))
            if self.shared_root is not None:
                result.notes.append(f"the cache the variants share is kept at "
                                    f"{self.shared_root} (its ledger: phases/written.json)")
        return result

    def _nothing_kept(self, result: CheckResult) -> bool:
        """A failure whose roots hold only what the report says (a recording's drift)."""
        return result.verdict == "fail" and not self.path.keeps_failed_roots

    def _accepted(self) -> Dict[str, accepted.Accepted]:
        """The layers whose miss this check accepts: its marker's, the session's."""
        marker = self.item.get_closest_marker(accepted.MARKER)
        if marker is None:
            return accepted.acceptance(self.settings.accept)
        file, line, _ = self.item.location
        return accepted.acceptance(self.settings.accept, [str(a) for a in marker.args],
                                   f"{file}:{(line or 0) + 1}",
                                   str(marker.kwargs.get("reason") or ""))

    # -- one phase -------------------------------------------------------------------------
    def run_phase(self, root: CacheRoot, phase: str, tree: Optional[Path] = None,
                  cwd: Optional[Path] = None, extra: Optional[PhaseSpec] = None,
                  env_extra: Optional[Dict[str, str]] = None
                  ) -> Tuple[Optional[PhaseRecord], Optional[CheckResult]]:
        """One child; `tree` runs it in the baseline's worktree, `cwd` elsewhere;
        `env_extra`: what the warm-start path sets (TORCH_CACHING_PRECOMPILE=1)."""
        nodeid, session = self.item.nodeid, self.session
        tampered = root.tampered()
        if tampered:  # someone else's directory in its place: run nothing from it
            return None, error_result(nodeid, phase, f"was not run: {tampered}", "", self.timings)
        spec_path = root.phases / f"{phase}-spec.json"
        first = self.path.phases[0]
        plan = next((p for p in self.path.phases if p.name == phase), None)
        warm_start = plan is not None and not first.at_baseline and plan.starts_warm
        limit = PhaseLimit.of(self.settings.timeout, first.name, phase,
                              self.timings.get(f"{first.name}_process_s"), warm_start)
        spec, env = self._spec_and_env(root, phase, spec_path, extra, env_extra)
        spec["timeout_s"] = limit.seconds
        invocation = Path(session.config.invocation_params.dir)
        if tree is not None:
            from pytest_compilecache.history.baseline import tree_env

            env = tree_env(env, tree)
            cwd = tree
        elif cwd is not None:  # `python -m pytest` had the invocation dir on sys.path
            env["PYTHONPATH"] = os.pathsep.join(
                [str(invocation)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        # what the child keeps private whatever the test's code does (child/confinement.py)
        spec["root"], spec["private"] = str(root.path), private_settings(env)
        spec_path.write_text(json.dumps(spec))
        try:
            self.session.timeline.mark(f"{phase} asked")
            with self.lease(phase, env, spec, spec_path) as lease, session.progress.step(
                    f"{phase} phase" + (" (in the baseline's worktree)"
                                        if tree is not None else "")):
                # a check's cold phase and its others fork from different interpreters
                launched = session.launcher.run(session.child_argv(self.item, root, phase, tree),
                                                env, str(cwd or invocation),
                                                root.phases / f"{phase}.log",
                                                limit.seconds,
                                                lane=self.lane + (phase != "cold"))
        except Exception as e:  # a lease timeout or an unusable lock dir: this check errors
            from pytest_compilecache.controller.gpus import LeaseTimeout

            if not isinstance(e, (LeaseTimeout, OSError)):
                raise
            return None, error_result(nodeid, phase, str(e), "", self.timings)
        self.session.timeline.mark(f"{phase} done")
        self.leases.append({"phase": phase, **lease.to_json()})
        self.launches[phase] = "forked" if launched.forked else "fresh"
        self._note_launch(phase, launched)
        return phase_outcome(nodeid, phase, root, Path(spec["out"]), launched, self.timings,
                             limit, self.notes)

    def _spec_and_env(self, root: CacheRoot, phase: str, spec_path: Path,
                      extra: Optional[PhaseSpec], env_extra: Optional[Dict[str, str]]
                      ) -> Tuple[PhaseSpec, Dict[str, str]]:
        """The phase's spec (what the child reads) and its environment."""
        s = self.settings
        spec: PhaseSpec = {"wire_version": WIRE_VERSION, "phase": phase, "nodeid": self.item.nodeid,
                "out": str(root.phases / f"{phase}.json"), "device": s.device, "seed": 0,
                "tolerance": s.warm_tolerance, "eager_tolerance": s.eager_tolerance,
                "cold_outputs": str(root.phases / "cold-outputs.pt"),
                "launcher_pid": os.getpid(), **(extra or {})}
        job, spec["job_id_source"] = resolve_job_id(s.job_id, self.item.nodeid, self.environ)
        env = phase_env(self.environ, root, s.threads, spec_path, job)
        env.update(env_extra or {})
        if phase != "warm" or "stored" in self.launches.values():
            # and a warm phase over a cold one restored from the store: that one's headers
            # were in its own session's shared dir, which no kept copy holds
            share_precompiled_headers(root, env, self.session.pch_dir())
        return spec, env

    def _note_launch(self, phase: str, launched: Any) -> None:
        """What launching the phase says: no preload, a fresh interpreter, leftovers."""
        dropped = getattr(self.session.launcher, "dropped", None)
        if dropped and not self.session.said_dropped:
            self.session.said_dropped = True
            self.notes.append("torch's compile stack and the test modules' installed "
                              f"libraries are not preloaded (torch is): {dropped}")
        if launched.fresh_because and self.settings.launcher == "preloaded":
            self.notes.append(f"the {phase} phase ran in a fresh interpreter, not forked "
                              f"from a preloaded one: {launched.fresh_because}")
        if launched.leftovers:  # ended, and said: a phase's daemon never outlives it
            from pytest_compilecache.launch.descendants import leftovers_note

            self.notes.append(leftovers_note(phase, launched.leftovers))
