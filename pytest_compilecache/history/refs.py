"""What `show` and `diff` read when an argument is a git revision, not a file: the key
manifest the store holds of that commit, as bisect takes GOOD and BAD. `diff main HEAD`
said "cannot read main": a user thinks in commits, the store files them by sha and
environment. No pytest, no torch (the environment is the store's, never this Python's:
show and diff read JSON only).
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence

from pytest_compilecache.history import git as history
from pytest_compilecache.history.store import DEFAULT_DIR


class RefError(Exception):
    """A revision without a manifest to read, said with what to do."""


def manifest_files(args: Sequence[str], store: Optional[str], environment: Optional[str],
                   cwd: Path) -> List[str]:
    """Each argument as a file to read: a file (or a .json path) as it is, else a revision (a
    branch, tag, sha, HEAD~2) as its commit's manifest in `store` (default: the
    repository's .compilecache). Where the commits have manifests in several
    environments, the one they share; `environment` (a prefix) chooses."""
    refs = [a for a in args if not _file(a)]
    if not refs:
        return list(args)
    try:
        repo = history.require_root(cwd)
    except history.GitError as e:
        raise RefError(f"{refs[0]} is not a file, nor a revision: {e}") from None
    commits = {a: _commit(repo, a) for a in refs}
    root = Path(store) if store else repo / DEFAULT_DIR
    found = {a: _manifests(root, c["sha"]) for a, c in commits.items()}
    for a, by_env in found.items():
        if not by_env:
            raise RefError(_none_for(a, commits[a], root))
    env = _environment(found, environment, root)
    return [str(found[a][env]) if a in found else a for a in args]


def _commit(repo: Path, ref: str) -> Dict[str, str]:
    try:
        return history.resolve(repo, ref)
    except history.GitError as e:
        raise RefError(f"{ref} is not a file, nor a revision: {e}") from None


def _file(arg: str) -> bool:
    """A file, or meant as one (a .json path: its read says why it cannot be read)."""
    return Path(arg).exists() or arg.endswith(".json")


def _manifests(root: Path, sha: str) -> Dict[str, Path]:
    """Per environment, the commit's manifest: a clean tree's, else a dirty one's."""
    out: Dict[str, Path] = {}
    for name in (f"{sha}-dirty.json", f"{sha}.json"):  # the clean one wins
        out.update({p.parent.name: p for p in root.glob(f"manifests/*/{name}")})
    return out


def _environment(found: Dict[str, Dict[str, Path]], prefix: Optional[str], root: Path) -> str:
    shared = set.intersection(*(set(by_env) for by_env in found.values()))
    chosen = sorted(e for e in shared if e.startswith(prefix or ""))
    if len(chosen) == 1:
        return chosen[0]
    named = ", ".join(found)
    if not chosen:
        where = "; ".join(f"{a}: {', '.join(sorted(e))}" for a, e in found.items())
        raise RefError(f"no environment of {root} has a key manifest of each of {named}"
                       + (f" matching --environment {prefix}" if prefix else "")
                       + f" ({where})")
    raise RefError(f"{named} ha{'s' if len(found) == 1 else 've'} key manifests in "
                   f"{len(chosen)} environments ({', '.join(chosen)}): pass --environment "
                   f"with one (a prefix will do)")


def _none_for(ref: str, commit: Dict[str, str], root: Path) -> str:
    return (f"{ref} is commit {commit['short']}, and {root} holds no key manifest of it: "
            f"record one with a session at that commit (pytest --compile-cache-check), "
            f"or pass --store with the store that holds it, or a report or manifest file")
