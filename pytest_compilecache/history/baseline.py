"""Key manifests of another commit: found in the store, or recorded by running the same
checks (cold only) in a child pytest session inside a temporary git worktree.

Used by the plugin (--compile-cache-baseline) and by `pytest-compilecache bisect`.
No pytest import: the recording session is a subprocess.
"""
from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence

from pytest_compilecache import jsonfile
from pytest_compilecache.history import git as history
from pytest_compilecache.history import manifest as mf
from pytest_compilecache.isolation import CHILD_SPEC_ENV
from pytest_compilecache.launch.launcher import SubprocessLauncher, pytest_child_flags
from pytest_compilecache.history.store import ManifestStore
from pytest_compilecache.terms import LIST_CHECKS_ENV


def _entry_point_installed() -> bool:
    eps = importlib.metadata.entry_points()
    group = eps.select(group="pytest11") if hasattr(eps, "select") else eps.get("pytest11", [])  # type: ignore[arg-type]
    return any(e.name == "compilecache" for e in group)


def tree_env(base: Dict[str, str], tree: Path) -> Dict[str, str]:
    """Imports resolve to the worktree's code first (flat and src layouts)."""
    env = dict(base)
    first = [str(tree)] + ([str(tree / "src")] if (tree / "src").is_dir() else [])
    env["PYTHONPATH"] = os.pathsep.join(first + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def record(tree: Path, pytest_args: Sequence[str], store: Path, options: Sequence[str],
           log: Path, timeout: Optional[float] = None, select: Optional[Iterable[str]] = None,
           cwd: Optional[Path] = None, keys_only: bool = False) -> int:
    """Run a cold-only recording session in `tree`; its manifest lands in `store`.
    `keys_only`: stopped before code generation (--compile-cache-keys-only), else
    compiled in full. Returns pytest's exit code (1: some check failed or errored;
    still recorded)."""
    how = "--compile-cache-keys-only" if keys_only else "--compile-cache-manifest-only"
    argv = ["-m", "pytest", *pytest_args, "--compile-cache-check",
            how, f"--compile-cache-store={store}",
            "-p", "no:cacheprovider", "-q", "--no-header", *options,
            *pytest_child_flags(_entry_point_installed(),
                                importlib.util.find_spec("xdist") is not None)]
    if select is not None:
        sel = log.with_suffix(".select.json")
        sel.write_text(json.dumps(sorted(select)))
        argv.append(f"--compile-cache-select={sel}")
    env = tree_env({k: v for k, v in os.environ.items() if k != CHILD_SPEC_ENV}, tree)
    launched = SubprocessLauncher().run(argv, env, str(cwd or tree), log, timeout)
    return 124 if launched.timed_out else int(launched.returncode or 0)




def collect_checks(tree: Path, pytest_args: Sequence[str], options: Sequence[str], log: Path,
                   cwd: Optional[Path] = None, timeout: Optional[float] = 600
                   ) -> Optional[List[str]]:
    """The checks `pytest_args` select in `tree`, from a collect-only session (seconds:
    nothing compiles, no phase starts), or None where it could not collect. Lets bisect
    read a commit's stored manifest instead of recording it only to learn its checks."""
    listed = log.with_suffix(".checks.json")
    argv = ["-m", "pytest", *pytest_args, "--compile-cache-check", "--collect-only", "-q",
            "--compile-cache-launcher=fresh", "--compile-cache-store=none",
            "-p", "no:cacheprovider", "--no-header", *options,
            *pytest_child_flags(_entry_point_installed(),
                                importlib.util.find_spec("xdist") is not None)]
    env = tree_env({k: v for k, v in os.environ.items() if k != CHILD_SPEC_ENV}, tree)
    env[LIST_CHECKS_ENV] = str(listed)
    launched = SubprocessLauncher().run(argv, env, str(cwd or tree), log, timeout)
    if launched.timed_out or launched.returncode != 0:
        return None
    try:
        names = jsonfile.load(listed)
    except (OSError, ValueError):
        return None
    return sorted(map(str, names)) if isinstance(names, list) else None


class Baseline:
    """REF's manifest in this environment, recorded once per store (file-locked): keys
    only (`keys_only`: stopped before code generation, a fraction of a cold compile),
    and in full for a check whose keys then differ (`record_in_full`)."""

    def __init__(self, repo: Path, rev: str, store: ManifestStore, options: Sequence[str],
                 rel_rootdir: Path, rel_invocation: Path, timeout: Optional[float],
                 keys_only: bool = False) -> None:
        self.repo = repo
        self.rev = rev
        self.commit = history.resolve(repo, rev)
        self.store = store
        self.options = list(options)
        self.rel_rootdir = rel_rootdir
        self.rel_invocation = rel_invocation
        self.timeout = timeout
        self._stack = contextlib.ExitStack()
        self._tree: Optional[Path] = None
        self.logs: List[Path] = []
        self._attempted: set = set()
        self._loaded: Dict[str, Dict[str, Any]] = {}  # env id -> manifest last read
        self.record_s = 0.0  # seconds spent recording REF in a worktree (0: read from the store)
        self.keys_only = keys_only
        self.in_full: set = set()  # node ids recorded again in full

    @property
    def label(self) -> str:
        return f"{self.rev} ({self.commit['short']} \"{self.commit.get('subject', '')}\")"

    def tree(self) -> Path:
        """The worktree's directory that corresponds to this session's rootdir."""
        if self._tree is None:
            self._tree = self._stack.enter_context(history.worktree(self.repo, self.commit["sha"]))
        return self._tree / self.rel_rootdir

    def manifest(self, env: Dict[str, Any], nodeids: Sequence[str]) -> Optional[Dict[str, Any]]:
        """REF's manifest holding `nodeids` (recorded if missing), or None. A stored one
        that is unusable raises manifest.BadManifest, whose text names the file and the
        repair: the session makes it the check's problem, never a crash in comparing."""
        env_id = mf.environment_id(env)
        sha = self.commit["sha"]
        # a check new at REF never appears there: record each node id at most once
        wanted = [n for n in nodeids if n not in self._attempted]

        def has_all(m: Optional[Dict[str, Any]]) -> bool:
            return m is not None and all(n in m["checks"] for n in wanted)

        if has_all(self._loaded.get(env_id)):  # read once, not once per check
            return self._loaded[env_id]
        found: Optional[Dict[str, Any]] = self.store.read(env_id, sha)
        if found is not None and has_all(found):
            self._loaded[env_id] = found
            return found
        with self.store.lock(f"record-{env_id}-{sha}"):
            found = self.store.read(env_id, sha)
            missing = [n for n in wanted if found is None or n not in found["checks"]]
            if missing:
                self._attempted.update(missing)
                started = time.monotonic()
                self._record(missing)
                self.record_s += time.monotonic() - started
                found = self.store.read(env_id, sha)
        if found is not None:
            self._loaded[env_id] = found
        return found

    def record_in_full(self, env: Dict[str, Any], nodeid: str) -> Optional[Dict[str, Any]]:
        """REF's manifest after recording `nodeid` again compiled in full (once: a
        keys-only recording's keys that differ from a head compiled in full are
        confirmed, or not, by REF's own full compile)."""
        env_id, sha = mf.environment_id(env), self.commit["sha"]
        with self.store.lock(f"record-{env_id}-{sha}"):
            found = self.store.read(env_id, sha)
            entry = (found or {}).get("checks", {}).get(nodeid) or {}
            if nodeid not in self.in_full and entry.get("keys_only"):
                self.in_full.add(nodeid)
                started = time.monotonic()
                self._record([nodeid], full=True)
                self.record_s += time.monotonic() - started
                found = self.store.read(env_id, sha)
        if found is not None:
            self._loaded[env_id] = found
        return found

    def _record(self, nodeids: Sequence[str], full: bool = False) -> None:
        root = self.tree()
        files = sorted({n.split("::")[0] for n in nodeids if (root / n.split("::")[0]).exists()})
        if not files:
            return
        log = Path(tempfile.mkdtemp(prefix="compilecache-baseline-")) / "record.log"
        assert self._tree is not None  # set by self.tree()
        rc = record(root, [str(root / f) for f in files] + ["--rootdir", str(root)],
                    self.store.root, self.options, log, self.timeout, select=nodeids,
                    cwd=self._tree / self.rel_invocation, keys_only=self.keys_only and not full)
        if rc == 0:  # a log worth reading is one of a recording that failed
            shutil.rmtree(log.parent, ignore_errors=True)
        else:
            self.logs.append(log)

    def describe(self) -> Dict[str, Any]:
        """How REF's keys were obtained, for the report (the Action's summary says it)."""
        return {"ref": self.rev, "label": self.label, "sha": self.commit["sha"],
                "obtained": "recorded in a worktree" if self.record_s else "read from the store",
                "record_s": round(self.record_s, 1), "store": str(self.store.root)}

    def close(self) -> None:
        self._stack.close()


