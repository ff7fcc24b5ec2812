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
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

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


@dataclass(frozen=True)
class CacheRoot:
    """Directory layout of one check; `watched` dirs are where caches write."""

    path: Path

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
        slug = "".join(c if c.isalnum() else "-" for c in nodeid.split("::")[-1])[:40]
        path = Path(tempfile.mkdtemp(prefix=f"compilecache-{slug}-", dir=parent))
        os.chmod(path, 0o700)  # mkdtemp already does; be explicit, the dir holds code
        root = cls(path)
        for d in (root.inductor, root.triton, root.tmp, root.phases):
            d.mkdir(mode=0o700)
        return root


ROOT_PARTS = ("inductor", "triton", "tmp", "phases")


def kept_roots(parent: Optional[str] = None, min_age_s: float = 3600.0) -> List[Tuple[Path, int]]:
    """Cache roots of earlier checks under `parent` (default: the temp dir), with their
    sizes: directories CacheRoot.create made (its prefix and its four subdirectories),
    owned by this user and untouched for `min_age_s` (a running session's are newer)."""
    base = Path(parent or tempfile.gettempdir())
    out = []
    now = time.time()
    for path in sorted(base.glob("compilecache-*")):
        try:
            st = path.lstat()
            if not path.is_dir() or path.is_symlink() or st.st_uid != os.getuid() \
                    or not all((path / p).is_dir() for p in ROOT_PARTS):
                continue
            newest = max((path / p).stat().st_mtime for p in ("", *ROOT_PARTS))
        except OSError:
            continue
        if now - newest >= min_age_s:
            out.append((path, sum(f.lstat().st_size for f in path.rglob("*")
                                  if f.is_file() and not f.is_symlink())))
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
