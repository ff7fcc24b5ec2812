"""What the session keeps across commits, for every check: the key manifest store, this
commit, the baseline (a worktree of --compile-cache-baseline's commit and its keys), and
the checks the baseline has that are gone. Built lazily: finding the git root is no
work for pytest's start-up."""
from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Set

import pytest

from pytest_compilecache.history import accepted_drift as ad
from pytest_compilecache.history import manifest as mf
from pytest_compilecache.model import CheckResult
from pytest_compilecache.options import DEFAULT_TIMEOUT_S
from pytest_compilecache.settings import Settings
from pytest_compilecache.terms import environment


class KeyHistory:
    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config, self.settings = config, settings
        self.manifest_paths: Set[Path] = set()
        self.check_ids: List[str] = []  # this session's checks (the baseline records them)
        self._commit: Optional[Dict[str, Any]] = None
        self._baseline: Any = None  # baseline.Baseline, built on first use
        self.compared: Dict[str, Dict[str, Any]] = {}  # node id -> its drift comparison
        self._accepted: Optional[Dict[str, Dict[str, Any]]] = None  # the file's entries

    @functools.cached_property
    def store_path(self) -> Optional[Path]:
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
            from pytest_compilecache.history.untracked import this_session

            # first asked after collection: the conftests and test modules are loaded
            # (paths are absolute: fixed at start)
            own = [self.settings.root, str(self.store_path) if self.store_path else None]
            self._commit = history.commit_info(self.config.rootpath, this_session(own))
        return self._commit

    def dirty_line(self) -> Optional[str]:
        """One line where this commit's tree is dirty: what made it so and what that
        turns off (a path ending in -dirty.json was the only sign)."""
        commit = self.commit()
        if self.store_path is None or not commit.get("dirty"):
            return None
        said = mf.dirty_causes(commit) or (
            f"git could not list untracked files: {commit['untracked_error']}"
            if commit.get("untracked_error") else "")
        off = [f"its keys go to {commit.get('short')}-dirty.json, replaced by the next dirty "
               f"run, not to the commit's manifest"]
        if self.settings.trend:
            off.append("no trend point, and no trend shown")
        if self.settings.store_caches:
            off.append("no compile caches kept in the store")
        return "work tree dirty" + (f" ({said})" if said else "") + ": " + "; ".join(off)

    def summary_line(self, results: Sequence[CheckResult] = ()) -> Optional[str]:
        """The lines under the summary: a dirty tree, the stale entries of the accepted
        drift file (a deploy compares no keys: it says none). `results`: the checks'
        drift as the controller has it (under xdist, the workers compared them)."""
        said = [x for x in (self.dirty_line(),) if x]
        if self.settings.baseline and not self.settings.baseline_warm:
            compared = {r.nodeid: r.drift for r in results if r.drift.get("status")}
            try:
                said += ad.stale_lines(self.accepted_entries(), {**compared, **self.compared},
                                       self.settings.baseline)
            except ad.AcceptedFileError as e:
                said.append(str(e))
        return "\n".join(said) or None

    @functools.cached_property
    def accepted_path(self) -> Path:
        from pytest_compilecache.history import git as history

        return (history.repo_root(self.config.rootpath) or self.config.rootpath) / ad.FILE

    def accepted_entries(self) -> Dict[str, Dict[str, Any]]:
        """The drift accepted in the repository (history/accepted_drift.py), read once."""
        if self._accepted is None:
            self._accepted = ad.load(self.accepted_path)
        return self._accepted

    def accept_deploy_misses(self, nodeid: str, result: CheckResult) -> None:
        """The deploy's misses the accepted drift explains are accepted (judge/accepted)."""
        from pytest_compilecache import layers
        from pytest_compilecache.judge import accepted

        try:
            entry = self.accepted_entries().get(nodeid)
        except ad.AcceptedFileError as e:
            result.problems.append(str(e))
            entry = None
        accepted.apply_drift(result, entry, self.settings.baseline or "REF", layers.KEYED)

    def store_entry(self, nodeid: str, cold: Dict[str, Any], entry: Dict[str, Any],
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
        for written, newer in store.kept_newer.items():
            result.notes.append(f"the stored key manifest {newer} was written by a newer "
                                f"pytest-compilecache: kept as it was; this check's keys went "
                                f"beside it, to {written}")

    def baseline(self) -> Any:
        if self._baseline is None:
            from pytest_compilecache.history import git as history
            from pytest_compilecache.history.baseline import Baseline
            from pytest_compilecache.history.store import DEFAULT_DIR, ManifestStore

            repo = history.require_root(self.config.rootpath)
            store = ManifestStore(self.store_path or repo / DEFAULT_DIR)
            s = self.settings
            options = [f"--compile-cache-device={s.device}", f"--compile-cache-threads={s.threads}",
                       *([f"--compile-cache-timeout={s.timeout}"] if s.timeout else [])]
            self._baseline = Baseline(
                repo, s.baseline or "", store, options,
                Path(self.config.rootpath).resolve().relative_to(repo.resolve()),
                Path(self.config.invocation_params.dir).resolve().relative_to(repo.resolve()),
                timeout=(s.timeout or DEFAULT_TIMEOUT_S) * 2 * (len(self.check_ids) + 1),
                keys_only=True)
        return self._baseline

    def compare_with_baseline(self, nodeid: str, cold: Dict[str, Any], entry: Dict[str, Any],
                              result: CheckResult, progress: Any) -> None:
        try:
            base = self.baseline()
            with progress.step(f"baseline keys at {self.settings.baseline}"):
                found = base.manifest(mf.environment_of(cold), self.check_ids or [nodeid])
            old = (found or {}).get("checks", {}).get(nodeid)
            # the baseline's components are loaded from the store where a key changed
            cmp = mf.compare_check(old, entry, self.settings.allow_drift,
                                   load_old=base.store.loader(found or {}))
            if (cmp["status"] == "drifted" and (old or {}).get("keys_only")
                    and not entry.get("keys_only")):
                # REF's keys were recorded stopped before code generation: its own full
                # compile says whether the drift is real (strides Inductor chose for
                # saved activations, shape guards added while lowering)
                differed = mf.changed_components(cmp, include_accepted=False)
                with progress.step(f"baseline keys at {self.settings.baseline}, in full"):
                    found = base.record_in_full(mf.environment_of(cold), nodeid)
                old = (found or {}).get("checks", {}).get(nodeid)
                cmp = mf.compare_check(old, entry, self.settings.allow_drift,
                                       load_old=base.store.loader(found or {}))
                said = f"the baseline's keys-only recording differed ({', '.join(differed[:4])}); "
                if (old or {}).get("keys_only"):  # the full recording failed: say so
                    logs = ", ".join(str(p) for p in base.logs)
                    said += (f"recording {base.label} again in full failed, so its keys-only "
                             f"keys were compared" + (f" (log: {logs})" if logs else ""))
                else:
                    said += f"{base.label} recorded again compiled in full: " + (
                        "the drift is confirmed" if cmp["status"] == "drifted" else
                        f"{cmp['status']}, the keys-only recording's difference was not drift")
                result.notes.append(said)
            self.compared[nodeid] = cmp
            ad.accept(cmp, self.accepted_entries().get(nodeid))
        except Exception as e:
            result.problems.append(f"baseline {self.settings.baseline}: {e}")
            return
        result.drift = {"base": base.label, "base_sha": base.commit["sha"], **cmp}
        if old is None:
            logs = ", ".join(str(p) for p in base.logs)
            result.notes.append(f"no key manifest at the baseline {base.label}: the check is new "
                                f"there or its recording failed" + (f" (log: {logs})" if logs else ""))
        elif cmp["status"] == "drifted":
            changed = mf.changed_components(cmp, include_accepted=False)
            result.problems.append(
                f"cache keys drifted against {base.label}: " + ", ".join(changed[:8])
                + f"; if the change is meant, accept it in the repository: "
                f"`{ad.command(self.settings.baseline or 'REF')}` (writes {ad.FILE}: commit it "
                f"with the change)")
        elif cmp.get("accepted_by"):
            result.notes.append(f"the key change is accepted by {ad.FILE} ("
                                + ", ".join(mf.changed_components(cmp)[:6]) + ")")

    def saved_caches(self, nodeid: str, notes: List[str]) -> Any:
        """The caches a session at the baseline kept in the store for this check
        (history/cachestore.Saved), or None: then the baseline compiles in a worktree,
        and `notes` says why where the store had something to say."""
        if self.store_path is None:
            return None
        from pytest_compilecache.history.cachestore import SavedCaches, Unusable

        base = self.baseline()
        try:
            return SavedCaches(self.store_path).find(base.commit["sha"], nodeid)
        except (Unusable, OSError) as e:  # unsafe or unreadable: never run, never a crash
            notes.append(f"{e}; compiled {base.label} in a worktree instead")
            return None

    def keep_caches(self, nodeid: str, cold: Dict[str, Any], root: Any) -> Optional[Path]:
        """Keep a passing check's root in the store under this commit (a clean one: a
        dirty tree's caches are no commit's), for later commits' deploy scenario."""
        commit = self.commit()
        if self.store_path is None or commit.get("dirty") or not commit.get("sha"):
            return None
        from pytest_compilecache.history.cachestore import SavedCaches
        from pytest_compilecache.history.store import ManifestStore

        env_id = mf.environment_id(mf.environment_of(cold))
        with ManifestStore(self.store_path).lock(f"caches-{env_id}"):  # xdist workers prune
            return SavedCaches(self.store_path).save(env_id, str(commit["sha"]), nodeid,
                                                     root.watched, root.phases, root.path)

    def gone_checks(self, results: List[CheckResult], collected_files: Set[str],
                    deselected: Set[str]) -> List[str]:
        """Checks the baseline has, in files this session collected, that no longer exist."""
        if (not self.settings.baseline or self.settings.baseline_warm or not results
                or self.store_path is None):
            return []
        from pytest_compilecache.history.store import ManifestStore

        try:
            sha = self.baseline().commit["sha"]
        except Exception:  # no repository: nothing was compared, nothing is gone
            return []
        r = next((r for r in results if r.versions), None)
        if r is None:
            return []
        env = environment(r.versions, r.device, r.device_name)
        base = ManifestStore(self.store_path).load(mf.environment_id(env), sha) or {}
        ran = {x.nodeid for x in results}
        return sorted(n for n in base.get("checks", {}) if n.split("::")[0] in collected_files
                      and n not in ran and n not in deselected)

    def close(self) -> None:
        if self._baseline is not None:
            self._baseline.close()

    def trend(self) -> List[Dict[str, Any]]:
        """The last commits' runs of each environment this commit has a manifest in
        (history/trend.py), for the report; none for a dirty tree or without a store."""
        commit = self.commit()
        if self.store_path is None or not self.settings.trend or commit.get("dirty"):
            return []
        from pytest_compilecache.history import trend
        from pytest_compilecache.history.store import ManifestStore

        from pytest_compilecache.history.git import on_line

        store, n = ManifestStore(self.store_path), self.settings.trend
        out, line = [], on_line(self.config.rootpath, str(commit.get("sha") or "HEAD"))
        for env_id in store.environments_of(str(commit.get("sha") or "")):
            # read more than shown: a manifest's file time is its last write, not its commit's
            history = trend.commits(store.recent(env_id, 4 * n + 20), n, line)
            out.append({"environment": env_id, **trend.to_json(
                history, self.settings.trend_alert, self._count, trend.store_explain(store))})
        return out

    def _count(self, older: str, newer: str) -> Optional[int]:
        from pytest_compilecache.history import git as history

        return history.count_between(self.config.rootpath, older, newer)

    def describe_baseline(self) -> Optional[Dict[str, Any]]:
        return self._baseline.describe() if self._baseline is not None else None
