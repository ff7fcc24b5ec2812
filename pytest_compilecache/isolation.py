"""A check's private cache root and the environment both of its phases run in.

Cache directories hold code that gets executed (generated .py, .so, cubins), so the
root is created 0700 and never shared between checks. Otherwise the children see the
user's settings, so a check shows the warm start production gets: their job id, their
compile-worker count, their cache flags. Both phases get the same environment, as a
restart has (forcing in-process compiles changes Triton's cache key: seen on an H200
with torch 2.11, kernels the static launcher cannot restore were recompiled).
"""
from __future__ import annotations

import getpass
import hashlib
import os
import re
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from pytest_compilecache.leftovers import mark_owner, remove_owned

CHILD_SPEC_ENV = "PYTEST_COMPILECACHE_CHILD"
# set by the preloaded launcher in a forked phase: where the phase lists the installed
# modules it imported, for the other preloaded interpreters to import (launcher.py)
IMPORTS_OUT_ENV = "PYTEST_COMPILECACHE_IMPORTS_OUT"

# Set by us per check; a value inherited from the user's shell would break isolation
# (TORCH_TRACE: a user's trace dir would collect every check's phases).
OWNED = (
    "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TMPDIR", "TORCH_TRACE", CHILD_SPEC_ENV,
)
# Where torch.compiler.config.job_id reads its default from, in its order.
JOB_ID_ENV = ("TORCH_COMPILE_JOB_ID", "TORCH_COMPILE_STICKY_PGO_KEY")
# Remote caches would make a "cold" run warm from someone else's entries.
_REMOTE_OFF = (
    "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE", "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE",
    "TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE", "TORCHINDUCTOR_BUNDLED_AUTOTUNE_REMOTE_CACHE",
    "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_REMOTE_PGO",
)
# the private dirs the plugin sets per phase, in the order they are said
DIR_SETTINGS = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TMPDIR")


@dataclass(frozen=True)
class CacheRoot:
    """Directory layout of one check; `watched` dirs are where caches write. `made`:
    the (device, inode) it was created with, to tell it from a directory put in its
    place later."""

    path: Path
    made: Optional[Tuple[int, int]] = None
    # the directories above it that create_at made (deepest first), removed with it
    made_above: Tuple[Path, ...] = ()

    @property
    def inductor(self) -> Path:
        return self.path / "inductor"

    @property
    def triton(self) -> Path:
        return self.path / "triton"

    @property
    def tmp(self) -> Path:
        return self.path / "tmp"

    @property
    def phases(self) -> Path:
        return self.path / "phases"

    @property
    def watched(self) -> Dict[str, Path]:
        return {"inductor": self.inductor, "triton": self.triton, "tmp": self.tmp}

    @classmethod
    def create(cls, nodeid: str, parent: Optional[str] = None) -> "CacheRoot":
        if parent:
            os.makedirs(parent, mode=0o700, exist_ok=True)
        unsafe = unsafe_parent(Path(parent or tempfile.gettempdir()))
        if unsafe:
            raise OSError(unsafe)
        slug = "".join(c if c.isalnum() else "-" for c in nodeid.split("::")[-1])[:40]
        return cls._made(Path(tempfile.mkdtemp(prefix=f"compilecache-{slug}-", dir=parent)))

    @classmethod
    def create_at(cls, path: Path) -> "CacheRoot":
        """A root at `path` exactly (the path of a root whose caches are restored into
        it): made here, never taken over (OSError where it exists), with the directories
        above it that are missing (0700, removed with it: another CI run's temp dir),
        under a safe existing one."""
        for attempt in range(3):  # another worker's root may remove a dir made above
            existing = path.parent
            while not existing.exists() and existing != existing.parent:
                existing = existing.parent
            unsafe = unsafe_parent(existing)
            if unsafe:
                raise OSError(unsafe)
            above = [d for d in path.parents if d not in (existing, *existing.parents)]
            made: List[Path] = []
            try:
                for d in reversed(above):  # top down
                    os.mkdir(d, 0o700)
                    made.insert(0, d)
                os.mkdir(path, 0o700)
                break
            except FileNotFoundError:
                _remove_empty(made)
                if attempt == 2:
                    raise
            except OSError:
                _remove_empty(made)
                raise
        try:
            return cls._made(path, tuple(made))
        except BaseException:  # half made: nothing left to block the next deploy
            shutil.rmtree(path, ignore_errors=True)
            _remove_empty(made)
            raise

    @classmethod
    def _made(cls, path: Path, above: Tuple[Path, ...] = ()) -> "CacheRoot":
        os.chmod(path, 0o700)  # mkdtemp already does; be explicit, the dir holds code
        st = os.lstat(path)
        root = cls(path, (st.st_dev, st.st_ino), above)
        # first in, last out (remove): `clean` leaves it while this process runs, and
        # knows it for a root whatever part of it a killed session made or removed
        mark_owner(path)
        for d in (root.inductor, root.triton, root.tmp, root.phases):
            d.mkdir(mode=0o700)
        return root

    def remove(self) -> None:
        """The root and the directories above it that were made for it (if empty)."""
        remove_owned(self.path)
        _remove_empty(self.made_above)

    def tampered(self) -> Optional[str]:
        """Why this root is no longer the private directory `create` made (checked
        before each phase: the phases run code from it), or None."""
        if self.made is None:
            return None
        try:
            st = os.lstat(self.path)
        except OSError as e:
            return f"its cache root {self.path} is gone ({e.strerror or e})"
        if stat.S_ISLNK(st.st_mode):
            return (f"its cache root {self.path} was replaced by a symlink to "
                    f"{os.path.realpath(self.path)}: someone else's directory would run as "
                    f"this user's code; refusing it")
        if (st.st_dev, st.st_ino) != self.made or not stat.S_ISDIR(st.st_mode):
            return (f"its cache root {self.path} was replaced by another directory since the "
                    f"check made it; refusing it")
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            return (f"its cache root {self.path} changed owner or mode (uid {st.st_uid}, mode "
                    f"{stat.S_IMODE(st.st_mode):o}): others could put code there; refusing it")
        return unsafe_parent(self.path.parent)


def _remove_empty(dirs: Sequence[Path]) -> None:
    """Remove `dirs` (deepest first) while they are empty."""
    for d in dirs:
        try:
            os.rmdir(d)
        except OSError:  # not empty (another root under it) or gone
            break


def unsafe_parent(path: Path) -> Optional[str]:
    """Why check roots must not be made under `path`: it, or a directory above it,
    lets another user replace what is inside (writable by others without the sticky
    bit, or owned by someone other than this user or root), so a check's root could be
    swapped for a directory holding their code. None when safe (/tmp is: sticky)."""
    me = os.getuid()
    try:
        real = Path(os.path.realpath(path))
        for d in (real, *real.parents):
            st = os.stat(d)
            if st.st_uid not in (me, 0):
                return (f"{d} is owned by another user (uid {st.st_uid}), who could replace a "
                        f"check's cache root under {path} with a directory of their code; "
                        f"use a directory of your own for --compile-cache-root")
            if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
                return (f"{d} is writable by other users (mode {stat.S_IMODE(st.st_mode):o}, "
                        f"no sticky bit): one of them could replace a check's cache root under "
                        f"{path} with a directory of their code; use a directory only you can "
                        f"write (chmod 700), or one with the sticky bit as /tmp has")
    except OSError as e:
        return f"cannot inspect {path}: {e.strerror or e}"
    return None


ROOT_PARTS = ("inductor", "triton", "tmp", "phases")


def cache_roots(parent: Optional[str] = None) -> List[Path]:
    """The cache roots of checks under `parent` (default: the temp dir): directories
    CacheRoot.create made (its prefix and its four subdirectories), owned by this user.
    Which of them `clean` may remove (none a running session uses) is leftovers.find's."""
    from pytest_compilecache.leftovers import OWNER_FILE

    base = Path(parent or tempfile.gettempdir())
    out = []
    for path in sorted(base.glob("compilecache-*")):
        try:  # a root a killed session was still making lacks parts but has its owner
            if (path.is_dir() and not path.is_symlink() and path.lstat().st_uid == os.getuid()
                    and (all((path / p).is_dir() for p in ROOT_PARTS)
                         or (path / OWNER_FILE).is_file())):
                out.append(path)
        except OSError:
            continue
    return out


def share_precompiled_headers(root: CacheRoot, env: Mapping[str, str], shared: Path) -> None:
    """Point this root's precompiled-header dir (torch 2.8+, under $TMPDIR, not the
    Inductor cache dir) at one dir shared by the session's checks. The PCH is
    content-addressed and file-locked and is in no cache key; sharing saves ~5 s of
    g++ per cold phase. The link is not followed by file snapshots."""
    user = next((env[k] for k in ("LOGNAME", "USER", "LNAME", "USERNAME") if env.get(k)), "")
    user = re.sub(r'[\\/:*?"<>|]', "_", user) or f"uid_{os.getuid()}"
    base = root.tmp / f"torchinductor_{user}"
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    shared.mkdir(mode=0o700, parents=True, exist_ok=True)
    link = base / "precompiled_headers"
    if not link.exists():
        link.symlink_to(shared, target_is_directory=True)


def job_id(nodeid: str) -> str:
    """Stable per check (--compile-cache-job-id=per-check)."""
    return "compilecache-" + hashlib.sha1(nodeid.encode()).hexdigest()[:12]


def job_id_from_env(environ: Mapping[str, str]) -> Optional[str]:
    """The job id torch would read from `environ` (its first set variable), or None."""
    return next((environ[k] for k in JOB_ID_ENV if environ.get(k)), None)


def resolve_job_id(setting: str, nodeid: str, environ: Mapping[str, str]
                   ) -> Tuple[Optional[str], str]:
    """The job id the phases get (None: they inherit the user's environment) and
    where it comes from. Without one torch persists no PGO state (pytorch PR 139001),
    so injecting one would prove a warm start the user's service does not get."""
    if setting == "per-check":
        return job_id(nodeid), "plugin (--compile-cache-job-id=per-check)"
    if setting != "inherit":
        return setting, "--compile-cache-job-id"
    name = next((k for k in JOB_ID_ENV if environ.get(k)), None)  # the variable, for the report
    return None, f"environment ({name})" if name else "none"


def phase_env(base: Mapping[str, str], root: CacheRoot, threads: int, spec_path: Path,
              job: Optional[str] = None) -> Dict[str, str]:
    """The user's environment with private cache dirs, remote caches off, a fixed
    thread count and, when `job` is given, that job id."""
    env = {k: v for k, v in base.items() if k not in OWNED}
    env.update({
        "TORCHINDUCTOR_CACHE_DIR": str(root.inductor),
        "TRITON_CACHE_DIR": str(root.triton),
        # precompiled headers (2.8+) live under $TMPDIR, not TORCHINDUCTOR_CACHE_DIR
        "TMPDIR": str(root.tmp),
        # part of the cache key on 2.13; one value for both phases, as a restart has
        "OMP_NUM_THREADS": str(threads),
        CHILD_SPEC_ENV: str(spec_path),
    })
    for name, value in bytecode_settings().items():  # the user's own, where set, stay
        env.setdefault(name, value)
    if job is not None:
        env[JOB_ID_ENV[0]] = job
    for k in _REMOTE_OFF:
        env[k] = "0"
    if "USER" not in env and "LOGNAME" not in env:
        # torch 2.8-2.12 call getpass.getuser() at import without a fallback
        try:
            env["USER"] = getpass.getuser()
        except Exception:
            env["USER"] = f"uid{os.getuid()}"
    return env


def bytecode_settings() -> Dict[str, str]:
    """How this interpreter writes bytecode, fixed when it started (-B,
    PYTHONDONTWRITEBYTECODE, PYTHONPYCACHEPREFIX), as the variables that give a phase
    the same: a test module that clears the environment at import must not make the
    phases write `__pycache__` into the repository (a dirty work tree: the commit's
    key manifests would go to `-dirty`)."""
    out = {}
    if sys.dont_write_bytecode:
        out["PYTHONDONTWRITEBYTECODE"] = "1"
    if sys.pycache_prefix:
        out["PYTHONPYCACHEPREFIX"] = sys.pycache_prefix
    return out


def private_settings(env: Mapping[str, str]) -> Dict[str, str]:
    """The cache settings of a phase's environment that the child must keep
    (child/confinement.reclaim): its dirs and, where the plugin turned them off, the
    remote caches."""
    return {k: env[k] for k in (*DIR_SETTINGS, *_REMOTE_OFF) if k in env}
