"""Git: which commit a run belongs to, revisions to compare with, temporary worktrees.

gitpython (a dependency) is imported lazily, off pytest start-up, as the plugin's own
(owndeps.import_own: never preloaded as the tests' library). Without it, or outside a
repository, the commit is recorded as "unknown" and the run carries on. No pytest, no torch.
"""
from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

from pytest_compilecache.history.untracked import SessionReads
from pytest_compilecache.owndeps import import_own

UNKNOWN: Dict[str, Any] = {"sha": "unknown", "short": "unknown", "dirty": None}


class GitError(RuntimeError):
    """A revision or repository problem, said so that the user can fix it."""


def _repo(path: Path) -> Any:
    try:
        git = import_own("git")
    except ImportError as e:
        raise GitError("gitpython is not installed: pip install gitpython") from e
    try:
        return git.Repo(str(path), search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise GitError(f"{path} is not inside a git repository") from None
    except git.GitCommandNotFound:
        raise GitError("the git executable was not found on PATH") from None


def require_root(path: Path) -> Path:
    """The work tree root of the repository holding `path`; GitError says why not."""
    return Path(_repo(path).working_tree_dir)


def repo_root(path: Path) -> Optional[Path]:
    try:
        return require_root(path)
    except GitError:
        return None


def _info(commit: Any, dirty: Optional[bool]) -> Dict[str, Any]:
    return {"sha": commit.hexsha, "short": commit.hexsha[:10], "dirty": dirty,
            "subject": commit.summary, "time": commit.committed_date}


def commit_info(path: Path, reads: Optional[SessionReads] = None) -> Dict[str, Any]:
    """sha, short sha, subject, dirty flag of HEAD at `path`; "unknown" when not knowable.
    What made a tree dirty is named (relative to the work tree): "modified", the tracked
    files that differ from HEAD; with `reads` (history/untracked.py), "untracked", the
    untracked files it says the session reads, and "ignored", the files the session did
    read that git ignores: a clean commit's manifest must come from a tree that matches
    the commit."""
    try:
        repo = _repo(path)
        head = repo.head.commit
    except (GitError, ValueError) as e:  # ValueError: a repository without commits
        return {**UNKNOWN, "error": str(e)}
    except Exception as e:  # gitpython raises many kinds; the run must go on
        return {**UNKNOWN, "error": f"{type(e).__name__}: {e}"}
    try:
        dirty = repo.is_dirty(untracked_files=False)
    except Exception:
        dirty = None
    info = _info(head, dirty)
    if dirty:
        with contextlib.suppress(Exception):  # the names are a courtesy
            info["modified"] = _listed(repo.git.diff("HEAD", "--name-only").splitlines())
    if reads is not None:
        try:
            found = _read_files(repo, reads)
        except Exception as e:  # unknowable: not clean either
            return {**info, "dirty": True, "untracked_error": f"{type(e).__name__}: {e}"}
        info.update({k: _listed(v) for k, v in found.items() if v})
        info["dirty"] = bool(dirty or any(found.values()))
    return info


NAMED = 50  # files named per kind in a manifest; the rest counted


def _listed(names: List[str]) -> List[str]:
    more = len(names) - NAMED
    return names[:NAMED] + ([f"(+{more} more)"] if more > 0 else [])


def _read_files(repo: Any, reads: SessionReads) -> Dict[str, List[str]]:
    """The untracked files the session reads, and the files it did read that git
    ignores (its ignore rules list no untracked file; `ls-files` says which are tracked)."""
    root = Path(repo.working_tree_dir)
    untracked = sorted(f for f in repo.untracked_files if reads(root / f))
    candidates = [f for f in reads.read_files(root) if f not in untracked]
    tracked: set = set()
    for i in range(0, len(candidates), 200):
        tracked.update(repo.git.ls_files("-z", "--", *candidates[i:i + 200]).split("\0"))
    return {"untracked": untracked,
            "ignored": sorted(f for f in candidates if f not in tracked)}


def resolve(path: Path, rev: str) -> Dict[str, Any]:
    repo = _repo(path)
    try:
        # a shallow clone resolves HEAD~1 to a sha whose object it lacks: gitpython
        # fails only when the commit is read, so read it here
        return _info(repo.commit(rev), False)
    except Exception:
        if (Path(repo.git_dir) / "shallow").exists():
            raise GitError(f"{rev!r} is not in this shallow clone of {repo.working_tree_dir}: "
                           f"fetch it first (git fetch --unshallow, or --deepen=N; in GitHub "
                           f"Actions, actions/checkout with fetch-depth: 0)") from None
        raise GitError(f"{rev!r} is not a commit in {repo.working_tree_dir} "
                       f"(a branch, tag or sha; fetch it first in a shallow clone)") from None


def commits_between(path: Path, good: str, bad: str) -> List[Dict[str, Any]]:
    """Commits after `good` up to and including `bad`, oldest first (ancestry path)."""
    repo = _repo(path)
    g, b = resolve(path, good)["sha"], resolve(path, bad)["sha"]
    if not repo.is_ancestor(g, b):
        raise GitError(f"{good} is not an ancestor of {bad}")
    shas = repo.git.rev_list("--reverse", "--ancestry-path", f"{g}..{b}").split()
    return [resolve(path, s) for s in shas]


def count_between(path: Path, older: str, newer: str) -> Optional[int]:
    """How many commits after `older` up to `newer` (None: not known here)."""
    try:
        return int(_repo(path).git.rev_list("--count", f"{older}..{newer}"))
    except Exception:  # a pruned or shallow history: the range is still named
        return None


def on_line(path: Path, head: str = "HEAD") -> Callable[[str], bool]:
    """Whether a commit is `head` or one of its ancestors: another branch's commits,
    recorded in the same store, are no points of this line's trend. A commit git cannot
    place (no repository, a shallow or pruned history) is kept, as before."""
    try:
        repo = _repo(path)
        tip = repo.commit(head).hexsha
    except Exception:  # no repository, no commit yet
        return lambda sha: True

    def placed(sha: str) -> bool:
        try:
            return sha == tip or bool(repo.is_ancestor(sha, tip))
        except Exception:  # an object this clone lacks: not known here
            return True
    return placed


@contextlib.contextmanager
def worktree(path: Path, sha: str) -> Iterator[Path]:
    """A detached temporary worktree of `sha`, removed afterwards."""
    repo = _repo(path)
    base = Path(tempfile.mkdtemp(prefix="compilecache-worktree-"))
    tree = base / "tree"
    try:
        repo.git.worktree("add", "--detach", str(tree), sha)
    except Exception as e:
        shutil.rmtree(base, ignore_errors=True)
        raise GitError(f"could not check out {sha[:10]} into a worktree: {e}") from None
    try:
        yield tree
    finally:
        with contextlib.suppress(Exception):
            repo.git.worktree("remove", "--force", str(tree))
        shutil.rmtree(base, ignore_errors=True)
        with contextlib.suppress(Exception):
            repo.git.worktree("prune")
