"""What a session leaves in the temp dir when it cannot clean up (SIGKILL of the
controller, the OOM killer, a machine that stops), found again by `pytest-compilecache
clean`, and never what a running session still uses.

Every directory a session makes (cache roots, the preloaded interpreters' lanes, the
slot locks, the xdist results, a private Redis server's) carries an owner record: the
pid of the process that made it and that process's start time. A directory whose owner
still runs is in use, whatever its age (a session of another user's CI job on a shared
runner: `clean --min-age 0` removed its live cache roots); a pid that was reused by
another process has another start time. Directories of older versions have no record:
only their age says. No pytest, no torch.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional, Tuple, Union

OWNER_FILE = ".compilecache-owner"  # no .json: the results dir is read as *.json

# the directories a session makes in the temp dir besides its cache roots, and what
# each held (said by `clean`)
SESSION_DIRS = (("pytest-compilecache-lanes-", "the preloaded interpreters' directory"),
                ("pytest-compilecache-locks-", "the slot locks"),
                ("pytest-compilecache-results-", "the xdist workers' results"),
                ("compilecache-redis-", "a private redis-server's directory"))


def _started(pid: int) -> Optional[str]:
    """The start time of process `pid` (clock ticks since boot, /proc/PID/stat field
    22), None where it does not run or /proc is not there."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()[19]


def _zombie(pid: int) -> bool:
    """Whether `pid` has exited and waits to be reaped (/proc/PID/stat state Z): where
    no init reaps orphans (a container), a killed session's children stay so."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] == "Z"


def mark_owner(path: Path) -> None:
    """Record the owners of directory `path` (just made by this process): this process,
    and in an xdist worker the controller that reports what the worker made (REPORTER_ENV,
    not the parent pid: a session a test's worker starts is no worker). A worker
    exits before its controller reports the check's kept root: with the worker's pid
    alone, `clean` beside the session removed a failing check's root before it was
    reported as kept (issue 53)."""
    (path / OWNER_FILE).write_text("".join(f"{pid} {_started(pid) or '-'}\n"
                                           for pid in _owners()))


# the session's controller ("pid start"), set where it starts and inherited by its
# xdist workers: what they make is the controller's to report
REPORTER_ENV = "PYTEST_COMPILECACHE_REPORTER"


def _owners() -> List[int]:
    pids = [os.getpid()]
    reporter = os.environ.get(REPORTER_ENV, "").partition(" ")[0]
    if reporter.isdigit() and int(reporter) not in pids:
        pids.append(int(reporter))
    return pids


def report_what_workers_make() -> Callable[[], None]:
    """In the controller: the directories its workers make name it too (mark_owner);
    returns the undo (a pytester session runs in the process of the tests)."""
    before = os.environ.get(REPORTER_ENV)
    os.environ[REPORTER_ENV] = f"{os.getpid()} {_started(os.getpid()) or '-'}"

    def undo() -> None:
        if before is None:
            os.environ.pop(REPORTER_ENV, None)
        else:
            os.environ[REPORTER_ENV] = before
    return undo


def remove_owned(path: Union[str, Path]) -> None:
    """Remove directory `path`, its owner record last: a removal cut short (a second
    interrupt, xdist's os._exit of a worker whose controller is gone, the session's
    watchdog) leaves a directory that `clean` still knows for a session's. rmtree alone
    went in directory order and could take the record first: `clean` then passed over
    what was left of a killed session's cache root (issue 53)."""
    import shutil

    try:
        entries = [e for e in os.scandir(path) if e.name != OWNER_FILE]
    except OSError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(path, OWNER_FILE))
    with contextlib.suppress(OSError):
        os.rmdir(path)


def owner(path: Path) -> Tuple[Optional[int], bool]:
    """An owner of `path` (mark_owner: its maker, the controller that reports it) and
    whether it still runs (the same process, not a reuse of its pid): the first that
    runs, else the maker; (None, False) for a directory without an owner record."""
    try:
        lines = (path / OWNER_FILE).read_text().split("\n")[:4]
        owners = [(int(p), started) for p, _, started in
                  (line.strip().partition(" ") for line in lines if line.strip())]
    except (OSError, ValueError):
        return None, False
    if not owners:
        return None, False
    for pid, started in owners:
        if _runs(pid, started):
            return pid, True
    return owners[0][0], False


def _runs(pid: int, started: str) -> bool:
    """Whether process `pid`, started at `started` ('-': unknown), still runs."""
    if _zombie(pid):  # a killed session's child that nobody reaped: it runs nothing
        return False
    now = _started(pid)
    if now is not None:
        return started in ("-", now)
    try:  # no /proc: whether the pid exists at all
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process under that pid: not ours, so not alive
        return False
    return True


@dataclass
class Found:
    path: Path
    size: int
    what: str               # "a kept cache root", or what a session dir held
    live_pid: Optional[int]  # the running process that uses it, if any


def _mine(path: Path) -> bool:
    try:
        st = path.lstat()
    except OSError:
        return False
    return path.is_dir() and not path.is_symlink() and st.st_uid == os.getuid()


def _size(path: Path) -> int:
    total = 0
    for f in path.rglob("*"):
        try:
            if f.is_file() and not f.is_symlink():
                total += f.lstat().st_size
        except OSError:
            continue
    return total


def _age_s(path: Path, parts: Tuple[str, ...] = ()) -> float:
    try:
        newest = max((path / p).stat().st_mtime for p in ("", *parts)
                     if p == "" or (path / p).exists())  # a half-made root lacks some
    except (OSError, ValueError):
        return 0.0
    return time.time() - newest


def session_dirs(tmp: Optional[str] = None) -> Iterator[Tuple[Path, str]]:
    """This user's session directories in the temp dir, with what each held."""
    base = Path(tmp or tempfile.gettempdir())
    for prefix, what in SESSION_DIRS:
        for path in sorted(base.glob(prefix + "*")):
            if _mine(path):
                yield path, what


def find(roots: List[Path], tmp: Optional[str], min_age_s: float,
         root_parts: Tuple[str, ...]) -> List[Found]:
    """What `clean` may remove (live_pid None) and what it leaves because a running
    process made it (live_pid set): the kept cache roots `roots`, and the session
    directories in the temp dir, untouched for `min_age_s`."""
    out = []
    candidates = [(p, "a kept cache root", root_parts) for p in roots]
    candidates += [(p, what, ()) for p, what in session_dirs(tmp)]
    for path, what, parts in candidates:
        pid, alive = owner(path)
        if alive:
            out.append(Found(path, 0, what, pid))
        elif _age_s(path, parts) >= min_age_s:
            out.append(Found(path, _size(path), what, None))
    return out


def set_aside(report: Optional[str]) -> Optional[str]:
    """Move an earlier session's report at `report` to `<report>.previous` as this
    session starts, and say so. A session that is killed (SIGKILL, the OOM killer) writes
    no report; the old one left in place read as its own to CI. A report that a session
    running now writes later is still merged at the end (render/report.write_report:
    only reports written after this session started are)."""
    if not report or not os.path.lexists(report) or os.path.isdir(report):
        return None
    aside = report + ".previous"
    try:
        os.replace(report, aside)
    except OSError as e:  # the old report stays; the session goes on
        return (f"the earlier report at {report} could not be moved aside to {aside} "
                f"({e.strerror or e}): if this session does not finish, that report is "
                f"not its own")
    return f"the earlier report at {report} was moved to {aside} when this session started"


def clean(roots: Any, parts: Any, min_age_s: float, dry_run: bool) -> List[str]:
    """`pytest-compilecache clean`: the kept cache roots (`roots`, each made of `parts`:
    isolation.cache_roots and ROOT_PARTS, handed in from below) and what killed
    sessions left in the temp dir (lanes, locks, results, a private Redis server's
    directory): this user's only, and never one whose owner process still runs (another
    session's, whatever its age). Returns what it says, a line each."""
    found = find(roots, None, min_age_s, parts)
    gone = [f for f in found if f.live_pid is None]
    said = []
    for f in gone:
        said.append(f"{'would remove' if dry_run else 'removed'} {f.path} "
                    f"({f.size / 1e6:.1f} MB; {f.what})")
        if not dry_run:
            remove_owned(f.path)
    roots = sum(1 for f in gone if f.what == "a kept cache root")
    total = sum(f.size for f in gone)
    said.append(f"{roots} kept cache root(s) and {len(gone) - roots} directory(ies) of sessions "
                f"that did not finish, {total / 1e6:.1f} MB"
                + (" (dry run: nothing removed)" if dry_run else " freed"))
    live = [f for f in found if f.live_pid is not None]
    if live:
        pids = sorted({f.live_pid for f in live if f.live_pid is not None})
        said.append(f"left {len(live)} in use by running session(s) (pid "
                    + ", ".join(map(str, pids)) + ")")
    return said
