"""A full disk, or a path that refuses a write, named as what it is.

Running out of space is an environment problem: the check says which path and why,
as an `error`, never as a diagnosis of the model (a warm run that rebuilds what a
briefly full disk kept the cold run from saving is not a cache miss) nor of the
plugin, and the session goes on. No pytest, no torch.
"""
from __future__ import annotations

import errno
import os
import re
from pathlib import Path
from typing import List, Optional

FULL_ERRNOS = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
# how a full disk reads in a phase's output (Python's strerror, torch's cache warnings)
FULL_TEXT = ("No space left on device", "Disk quota exceeded", "[Errno 28]")
MIN_FREE = 1 << 20  # below this the session's files (reports, manifests, logs) do not fit
# torch's log prefix: "W1125 00:13:57.700000 7699 torch/_inductor/codecache.py:2193] [0/0] "
_GLOG = re.compile(r"^[DIWEF]\d{4} [\d:.]+ \d+ \S+\] (\[[^\]]*\] )?")


def nearest_existing(path: Path) -> Path:
    """`path`, or its nearest ancestor that exists: where a path not made yet would be."""
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def free_bytes(path: Path) -> Optional[int]:
    try:
        st = os.statvfs(nearest_existing(Path(path)))
    except (OSError, AttributeError):
        return None
    return st.f_bavail * st.f_frsize


def no_space(path: Path, need: int = MIN_FREE) -> Optional[str]:
    """Why `path`'s filesystem cannot take the session's files (less than `need` bytes
    free), or None."""
    free = free_bytes(path)
    if free is not None and free < need:
        return (f"the filesystem of {path} is full ({free} bytes free): no space left on "
                f"device; free some space or choose another location")
    return None


def write_problem(what: str, path: object, e: OSError) -> str:
    """One line for a failed write: the path, the cause and whose problem it is."""
    cause = e.strerror or str(e)
    blocker = (_file_in_the_way(Path(str(path)))
               if e.errno in (errno.EEXIST, errno.ENOTDIR) else None)
    if blocker is not None:  # "File exists" alone names nothing a user can move
        return (f"could not write {what} to {path}: {blocker} is a file, not a directory "
                f"(errno {e.errno}); an environment problem, not the model: move or delete "
                f"{blocker}, or choose another location")
    if e.errno in FULL_ERRNOS:
        advice = ("the disk is full: an environment problem, not the model nor the plugin; "
                  "free space there or choose another location")
    elif e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        advice = ("the path refuses writes (permissions, an immutable file, a read-only "
                  "mount): an environment problem; choose a writable location")
    else:
        advice = "an environment problem, not the model"
    return f"could not write {what} to {path}: {cause} (errno {e.errno}); {advice}"


def _file_in_the_way(path: Path) -> Optional[Path]:
    """The first of `path` and its ancestors that is there but is no directory, where a
    directory had to be (the store, the report's directory), or None."""
    for p in reversed((path, *path.parents)):
        if p.exists() and not p.is_dir():
            return p
    return None


def full_lines(log: Path, limit: int = 64 << 20, keep: int = 3) -> List[str]:
    """The first lines of a phase log that say the disk was full (read in chunks, at
    most `limit` bytes: a log may be huge)."""
    found: List[str] = []
    try:
        with open(log, "rb") as f:
            seen = 0
            rest = b""
            while seen < limit and len(found) < keep:
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                seen += len(chunk)
                lines = (rest + chunk).split(b"\n")
                rest = lines.pop()[-4096:]
                _scan(lines, found, keep)
            if rest and len(found) < keep:  # the last line, unterminated: a process killed
                _scan([rest], found, keep)    # mid-write on a full disk ends so
    except OSError:
        return found
    return found


def _scan(lines: List[bytes], found: List[str], keep: int) -> None:
    for raw in lines:
        line = _GLOG.sub("", raw.decode(errors="replace").strip())
        if any(t in line for t in FULL_TEXT) and line[:300] not in found:
            found.append(line[:300])
            if len(found) >= keep:
                return


def out_of_space(phase: str, root: Path, log: Path, text: str = "") -> Optional[str]:
    """Why a phase that failed (or whose run went wrong) is down to a full disk: its
    cache root's filesystem is full now, or its output or error says so; None
    otherwise."""
    free = free_bytes(root)
    said = ([ln for ln in text.splitlines() if any(t in ln for t in FULL_TEXT)][:2]
            or full_lines(log))
    if (free is None or free >= MIN_FREE) and not said:
        return None
    now = f" ({free} bytes free there now)" if free is not None else ""
    return (f"ran out of disk space: the filesystem of its cache root {root} was full{now}"
            + (f"; its output says: {said[0]}" if said else "")
            + ": an environment problem, not the model nor the plugin; free space there or "
              "point --compile-cache-root at a larger disk")
