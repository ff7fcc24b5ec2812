"""The compile caches a commit's checks left, kept in the manifest store beside its key
manifests (--compile-cache-store-caches), so that the deploy scenario of a later commit
warms its code over them instead of compiling the baseline again in a worktree: what a
service that ships main's caches sees, at the cost of the warm run alone.

One saved check is its cache root as the passing check left it: the watched cache
directories, the cold phase's record and the outputs the warm run compares with:

    <store>/caches/<environment id>/<commit sha>/<check>/{inductor,triton,tmp}/...
                                                        /phases/cold.json, cold-outputs.pt
                                                        /meta.json

These directories are code (compiled kernels, generated Python): they are written
0700/0600, and one is restored only where it and the directories above it are this
user's, writable by nobody else, hold nothing but plain files and directories and stay
within a size cap (PYTEST_COMPILECACHE_MAX_SAVED_GB). The newest KEEP_COMMITS commits of
each environment are kept. Pure stdlib: no pytest, no torch.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from pytest_compilecache import files as fs
from pytest_compilecache import jsonfile

CACHES = "caches"
KEEP_COMMITS = 3  # per environment: main's last runs; a PR's base is usually the newest
MAX_GB_ENV = "PYTEST_COMPILECACHE_MAX_SAVED_GB"
DEFAULT_MAX_GB = 20.0
# what a saved check's phases/ holds: the cold phase's record and the outputs it kept
PHASE_FILES = ("cold.json", "cold-outputs.pt")


class Unusable(ValueError):
    """Saved caches that are there but must not be run: says which and why."""


def check_dir(nodeid: str) -> str:
    """A saved check's directory name: readable, bounded, unique by a hash."""
    slug = "".join(c if c.isalnum() else "-" for c in nodeid.split("::")[-1])[:40]
    return f"{slug}-{hashlib.sha1(nodeid.encode()).hexdigest()[:12]}"


def max_bytes() -> int:
    try:
        gb = float(os.environ.get(MAX_GB_ENV) or DEFAULT_MAX_GB)
    except ValueError:
        gb = DEFAULT_MAX_GB
    return int(gb * 1024 ** 3)


@dataclass(frozen=True)
class Saved:
    """One check's saved caches, validated when found."""
    path: Path
    env_id: str
    sha: str
    nodeid: str
    saved_at: float
    files: int
    size: int
    # the root the caches were compiled in: Inductor's entries name their Triton kernels
    # by absolute path (their tuning results are looked up beside them), so a copy runs
    # as it did only at that path; None for a copy kept before this was recorded
    root: Optional[str] = None

    def restore(self, watched: Mapping[str, Path], phases: Path) -> None:
        """Copy the cache directories into a check's (empty) root and the cold phase's
        files into its phases/, private as the root is."""
        for label, dest in watched.items():
            src = self.path / label
            if src.is_dir():
                shutil.copytree(src, dest, dirs_exist_ok=True, symlinks=True)
        for name in PHASE_FILES:
            src = self.path / "phases" / name
            if src.is_file():
                shutil.copyfile(src, phases / name)
        for label, dest in {**watched, "phases": phases}.items():
            _private(dest)


class SavedCaches:
    """The store's `caches/` directory."""

    def __init__(self, store_root: Path) -> None:
        self.root = Path(store_root) / CACHES

    def save(self, env_id: str, sha: str, nodeid: str, watched: Mapping[str, Path],
             phases: Path, root: Optional[Path] = None) -> Path:
        """Keep one check's root under its commit and environment (replacing what an
        earlier session kept for it), then drop the environment's older commits."""
        dest = self.root / env_id / sha / check_dir(nodeid)
        if not self.root.parent.is_dir():  # the store itself, when it is made here: 0700
            self.root.parent.mkdir(parents=True, exist_ok=True)
            os.chmod(self.root.parent, 0o700)
        for d in (self.root, self.root / env_id, dest.parent):  # each 0700, whatever the umask
            d.mkdir(mode=0o700, exist_ok=True)
            os.chmod(d, 0o700)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
        try:
            count, size = 0, 0
            for label, src in watched.items():
                if not src.is_dir():
                    continue
                shutil.copytree(src, tmp / label, symlinks=True, ignore=_not_kept)
            (tmp / "phases").mkdir(mode=0o700)
            for name in PHASE_FILES:
                if (phases / name).is_file():
                    shutil.copyfile(phases / name, tmp / "phases" / name)
            for path, st in _walk(tmp):
                if stat.S_ISREG(st.st_mode):
                    count, size = count + 1, size + st.st_size
            if size > max_bytes():  # every restore would refuse it
                raise Unusable(f"{size / 1024 ** 3:.1f} GB, over the {max_bytes() / 1024 ** 3:g} GB "
                               f"a restore accepts (raise {MAX_GB_ENV} if that is meant)")
            _private(tmp)
            fs.write_json_atomic(tmp / "meta.json", {
                "nodeid": nodeid, "sha": sha, "environment": env_id,
                "saved_at": time.time(), "files": count, "bytes": size,
                "root": str(root) if root is not None else None})
            os.chmod(tmp / "meta.json", 0o600)
            if dest.exists():
                shutil.rmtree(dest)
            os.replace(tmp, dest)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self.prune(env_id, keep=KEEP_COMMITS, current=sha)
        return dest

    def prune(self, env_id: str, keep: int, current: str = "") -> List[str]:
        """Remove all but the `keep` most recently written commits of one environment
        (never `current`); returns the shas removed."""
        env_dir = self.root / env_id
        if not env_dir.is_dir():
            return []
        def mtime(d: Path) -> float:
            try:
                return d.stat().st_mtime
            except FileNotFoundError:  # another session pruned it first
                return 0.0

        shas = sorted((d for d in env_dir.iterdir() if d.is_dir() and not d.is_symlink()),
                      key=mtime, reverse=True)
        gone = [d for d in shas[keep:] if d.name != current]
        for d in gone:
            shutil.rmtree(d, ignore_errors=True)
        return [d.name for d in gone]

    def find(self, sha: str, nodeid: str, prefer_env: Optional[str] = None) -> Optional[Saved]:
        """The check's saved caches of commit `sha` (in `prefer_env` where it holds them,
        else the environment saved last), or None where none were kept. Raises Unusable
        for saved caches that are there but may not be run."""
        if not self.root.is_dir():
            return None
        name = check_dir(nodeid)
        found: List[Tuple[str, Path]] = []
        for env_dir in sorted(self.root.iterdir()):
            cand = env_dir / sha / name
            if env_dir.is_dir() and cand.is_dir():
                found.append((env_dir.name, cand))
        if not found:
            return None
        picked = [f for f in found if f[0] == prefer_env] or found
        saved, refused = [], []
        for env_id, path in picked:
            try:
                saved.append(self._read(env_id, sha, nodeid, path))
            except Unusable as e:  # another environment's copy may still be usable
                refused.append(e)
        if not saved:
            raise refused[0]
        return max(saved, key=lambda s: s.saved_at)

    def _read(self, env_id: str, sha: str, nodeid: str, path: Path) -> Saved:
        from pytest_compilecache.isolation import unsafe_parent

        unsafe = unsafe_parent(path)
        if unsafe:
            raise Unusable(f"the saved caches {path} are not private: {unsafe}")
        count, size, cap = 0, 0, max_bytes()
        for p, st in _walk(path):
            why = _unsafe(p, st)
            if why:
                raise Unusable(f"the saved caches {path} hold {p}, {why}: they would run as "
                               f"this user's code; refusing them")
            if stat.S_ISREG(st.st_mode):
                count, size = count + 1, size + st.st_size
                if size > cap:
                    raise Unusable(f"the saved caches {path} hold over {cap / 1024 ** 3:g} GB "
                                   f"(raise {MAX_GB_ENV} if that is meant)")
        try:
            meta = jsonfile.load(path / "meta.json")
        except (OSError, ValueError) as e:
            raise Unusable(f"the saved caches {path} have no readable meta.json ({e})") from None
        if (not isinstance(meta, dict) or meta.get("nodeid") != nodeid or meta.get("sha") != sha
                or meta.get("environment") != env_id):
            raise Unusable(f"the saved caches {path} say they are of "
                           f"{json.dumps(meta)[:200] if isinstance(meta, dict) else meta!r}, "
                           f"not of {nodeid} at {sha} in {env_id}")
        if not (path / "phases" / "cold.json").is_file():
            raise Unusable(f"the saved caches {path} lack the cold phase's record")
        saved_at, root = meta.get("saved_at"), meta.get("root")
        return Saved(path, env_id, sha, nodeid,
                     float(saved_at) if isinstance(saved_at, (int, float)) else 0.0, count, size,
                     root if _root_path(root) else None)

    def summary(self) -> Dict[str, List[str]]:
        """environment id -> the commits kept (newest first), for `show`-like listings."""
        out: Dict[str, List[str]] = {}
        if self.root.is_dir():
            for env_dir in sorted(self.root.iterdir()):
                if env_dir.is_dir():
                    out[env_dir.name] = [d.name for d in sorted(
                        env_dir.iterdir(), key=lambda d: d.stat().st_mtime, reverse=True)]
        return out


def _root_path(root: Any) -> bool:
    """A root path a meta.json may name: absolute, plain, a check root's name."""
    if not isinstance(root, str) or not 0 < len(root) < 4096 or "\0" in root:
        return False
    path = Path(root)
    return path.is_absolute() and ".." not in path.parts and path.name.startswith("compilecache-")


def _not_kept(directory: str, names: List[str]) -> List[str]:
    """What a saved check leaves out: locks, bytecode, links (the session's shared
    precompiled headers are one: outside the root, and a link is never restored) and
    whatever is not a plain file or directory (a socket a process left in tmp/)."""
    def plain(p: str) -> bool:
        st = os.lstat(p)
        return stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)

    return [n for n in names if n in ("locks", "__pycache__") or n.endswith(".lock")
            or not plain(os.path.join(directory, n))]


def _walk(top: Path) -> List[Tuple[Path, os.stat_result]]:
    """Every entry under `top` with its lstat (links are not followed)."""
    out = [(top, os.lstat(top))]
    for dirpath, dirnames, filenames in os.walk(top):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            out.append((p, os.lstat(p)))
    return out


def _unsafe(path: Path, st: os.stat_result) -> Optional[str]:
    if stat.S_ISLNK(st.st_mode):
        return f"a link to {os.path.realpath(path)}"
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        return "not a plain file or directory"
    if st.st_uid != os.getuid():
        return f"owned by another user (uid {st.st_uid})"
    if st.st_mode & 0o022:
        return f"writable by other users (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _private(top: Path) -> None:
    """Directories 0700, files 0600 (what torch leaves is the umask's)."""
    for p, st in _walk(top):
        if stat.S_ISDIR(st.st_mode):
            os.chmod(p, 0o700)
        elif stat.S_ISREG(st.st_mode):
            os.chmod(p, st.st_mode & 0o700 | 0o600)
