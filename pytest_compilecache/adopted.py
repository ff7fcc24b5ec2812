"""Directories the plugin takes from outside and uses as its own: the session dirs a
parent session hands on in the environment (PYTEST_COMPILECACHE_PCH_DIR,
PYTEST_COMPILECACHE_SHARED_DIR, the lock and results dirs), what xdist's controller
hands its workers, and the root a function's variants share. They hold what the phases
load and run (precompiled headers are content-addressed, so a planted `.gch` would be
compiled into every kernel), so each gets the checks a --compile-cache-root gets
before the first use: no symlink, this user's, open to no one else, under parents no
one else can swap. A refusal is the environment's fault, named with its fix.

No pytest, no torch.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Optional

from pytest_compilecache.isolation import unsafe_parent


class UnsafeDir(OSError):
    """A directory others could write into, or one that is not there: an environment
    fault (its message names the directory, where it came from and the fix)."""


def problem(path: Path) -> Optional[str]:
    """Why `path` is not a private directory of this user, or None."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return f"cannot be used ({e.strerror or e})"
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        return f"is a symlink (to {os.path.realpath(path)})"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != os.getuid():
        return f"is owned by another user (uid {st.st_uid}, mode {mode:o})"
    if st.st_mode & 0o077:
        return f"is open to other users (mode {mode:o})"
    above = unsafe_parent(path.parent)
    return f"lies where another user can swap it ({above})" if above else None


def adopt(path: str, named_by: str, fix: str) -> str:
    """`path`, checked (UnsafeDir where refused). `named_by`: where it came from
    (an environment variable, xdist's controller); `fix`: what makes it usable."""
    why = problem(Path(path))
    if why is not None:
        raise UnsafeDir(f"{named_by} names {path}, which {why}: another user could put "
                        f"files there that this session's compiles load and run; an "
                        f"environment fault, not the plugin's or the model's; {fix}")
    return path


def from_env(var: str) -> Optional[str]:
    """The directory environment variable `var` names, checked; None where unset."""
    value = os.environ.get(var)
    if not value:
        return None
    return adopt(value, var, f"unset {var} (the session then makes its own), or name a "
                             f"directory only you can write (mkdir -m 700)")


def handed(given: Optional[str], var: str) -> Optional[str]:
    """An xdist worker's directory: the one its controller handed it, else the one
    its environment names; checked either way (a worker starts after the controller
    checked them: one chowned meanwhile is refused too)."""
    if not given:
        return from_env(var)
    return adopt(given, f"xdist's controller (as {var})",
                 "find what changed it since the session started, and run again")
