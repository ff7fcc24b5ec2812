"""What `pytest-compilecache bisect` compares: each commit's key manifest, read from the
store where it holds the selected checks, else recorded by the checks' cold phase in a
worktree of the commit (history/baseline.record). The search and its printing are the
CLI's (cli.py)."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple


class Unrecordable(Exception):
    """A commit at which the selected checks recorded no keys (crash, collection error)."""


class Manifests:
    """The manifests bisect compares: a commit's from the store, else recorded in a
    worktree of it (`recorded`: those commits; `logdir`: their logs). `env_id`: this
    machine's environment (the CLI's, from the Python it runs)."""

    def __init__(self, repo: Path, cwd: Path, pytest_args: Sequence[str], store: Optional[str],
                 env_id: str, device: str) -> None:
        from pytest_compilecache.history.store import DEFAULT_DIR, ManifestStore

        self.repo = repo
        self.pytest_args = [a for a in pytest_args if a != "--"]
        self.rel_cwd = cwd.resolve().relative_to(repo.resolve())
        self.store = ManifestStore(Path(store) if store else repo / DEFAULT_DIR)
        self.env_id = env_id
        self.options = [f"--compile-cache-device={device}"]
        self.logdir = Path(tempfile.mkdtemp(prefix="compilecache-bisect-"))
        self.recorded: List[str] = []

    def good(self, commit: Dict[str, Any]) -> Tuple[Dict[str, Any], List[str]]:
        """GOOD's manifest and the checks the arguments select: where the store holds
        GOOD's keys for every check a collect-only session at GOOD lists (seconds), it is
        read, not recorded again (a recording compiles every check)."""
        from pytest_compilecache.history import git as history
        from pytest_compilecache.history.baseline import collect_checks

        found = self.store.read(self.env_id, commit["sha"])
        if found is not None and found.get("checks"):
            with history.worktree(self.repo, commit["sha"]) as tree:
                log = self.logdir / f"{commit['short']}.collect.log"
                checks = collect_checks(tree, self.pytest_args, self.options, log,
                                        cwd=tree / self.rel_cwd)
            if checks and all(_full(found, c) for c in checks):
                print(f"  {commit['short']}: read from {self.store.root} "
                      f"({len(checks)} check(s) the arguments select)", flush=True)
                return found, checks
        base = self.at(commit, None)  # recorded to learn which checks the args select
        return base, sorted(base["checks"])

    def at(self, commit: Dict[str, Any], targets: Optional[List[str]]) -> Dict[str, Any]:
        """The commit's manifest holding `targets` (None: exactly what pytest_args select,
        recorded into a store of its own: the shared one also holds earlier sessions'
        checks, which these arguments may not select)."""
        from pytest_compilecache.history import git as history
        from pytest_compilecache.history.baseline import record
        from pytest_compilecache.history.store import ManifestStore

        sha = commit["sha"]
        found = self.store.read(self.env_id, sha)
        if found is not None and targets is not None and all(_full(found, t) for t in targets):
            return found
        into = self.store if targets is not None else ManifestStore(self.logdir / "selected")
        with history.worktree(self.repo, sha) as tree:
            log = self.logdir / f"{commit['short']}.log"
            print(f"  recording {commit['short']} \"{commit.get('subject', '')}\" (log: {log})",
                  flush=True)
            rc = record(tree, self.pytest_args, into.root, self.options, log, select=targets,
                        cwd=tree / self.rel_cwd)
        self.recorded.append(sha)
        found = into.read(self.env_id, sha)
        if into is not self.store and found is not None:  # kept for later bisects and diffs
            self.store.merge(found["commit"], found["environment"],
                             into.inlined(found)["checks"])
        missing = [t for t in targets or [] if found is None or t not in found["checks"]]
        if found is None or missing:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:]) if log.exists() else ""
            raise Unrecordable(f"no cache keys recorded at {commit['short']} "
                               f"\"{commit.get('subject', '')}\" (pytest exit code {rc}"
                               + (f"; missing: {', '.join(missing)}" if missing else "")
                               + f"); its log {log} ends with:\n{tail}")
        return found


def _full(manifest: Dict[str, Any], nodeid: str) -> bool:
    """The manifest holds the check's keys of a full cold compile: bisect compares full
    recordings only (a baseline's keys-only entry is recorded again)."""
    entry = manifest["checks"].get(nodeid)
    return isinstance(entry, dict) and not entry.get("keys_only")
