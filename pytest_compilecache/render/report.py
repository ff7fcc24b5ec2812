"""The versioned JSON report: built from a session's results, written (merged with a
report a concurrent session of the same commit wrote, beside one of another), read back
(`problem` says why a file is none). Text renderings live in render/lines.py."""
from __future__ import annotations

import contextlib
import datetime as _dt
import itertools
import os
import stat
from pathlib import Path
from typing import (Any, Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional,
                    Sequence, Tuple)

from pytest_compilecache import jsonfile
from pytest_compilecache.files import write_json_streamed
from pytest_compilecache.model import CheckResult

SCHEMA = "pytest-compilecache/report"
# 2: the verdict n/a (a warm-start path torch or the workload cannot take), its count
# 3: a graph row that needs no explaining keeps its components' digest, not them
#    (judge/keyed.graph_rows); versions 1 and 2 are still read
# 4: a layer's state `accepted` and its `accepted` (who accepted the cost); 1-3 still read
SCHEMA_VERSION = 4


def created_at(data: Dict[str, Any]) -> Optional[float]:
    """The report's `created` as wall-clock time (its timeline places the leases' times
    by it); None where it is not a time."""
    try:
        return _dt.datetime.fromisoformat(str(data.get("created"))).timestamp()
    except ValueError:
        return None


def now() -> str:
    """Milliseconds: a session that starts in the same second as another one wrote the
    report must not take that report for a concurrent one and merge it."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


VERDICTS = ("pass", "fail", "error", "recorded", "n/a", "not run")


def summarize(checks: Iterable[Dict[str, Any]]) -> Dict[str, int]:
    """Count of checks per verdict: the report's `summary`."""
    verdicts = [c.get("verdict") for c in checks]
    return {v: verdicts.count(v) for v in VERDICTS}


def problem(data: Any) -> Optional[str]:
    """Why `data` is not a report this version can read, or None (one line)."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return "not a pytest-compilecache report"
    version = data.get("schema_version")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        return (f"written by a newer pytest-compilecache (report schema_version {version!r}, "
                f"this one reads {SCHEMA_VERSION}): upgrade pytest-compilecache")
    checks = data.get("checks")
    if not isinstance(checks, list):
        return "'checks' is not a list"
    for i, c in enumerate(checks):
        if not isinstance(c, dict) or not isinstance(c.get("nodeid"), str):
            return f"checks[{i}] has no node id"
        if c.get("verdict") not in VERDICTS:
            return f"checks[{i}] ({c['nodeid']}) has no valid verdict: {c.get('verdict')!r}"
    return None


class Streamed:
    """A report's checks read one at a time (a session's spool, controller/spool.py),
    with their (node id, path) known before: never all in memory at once."""

    def __init__(self, ids: Sequence[Tuple[str, str]], read: Callable[[], Iterator[Dict[str, Any]]]
                 ) -> None:
        self.ids, self.read = list(ids), read

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        return self.read()


def build_report(results: Sequence[CheckResult], settings: Dict[str, Any],
                 plugin_version: str, commit: Optional[Dict[str, Any]] = None,
                 checks: Optional[Streamed] = None) -> Dict[str, Any]:
    """`results`: every check, or only its summary row where `checks` streams their
    JSON (CheckResult.summary_row)."""
    counts = summarize({"verdict": r.verdict} for r in results)
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION,
            "created": now(), "plugin_version": plugin_version, "settings": settings,
            "commit": commit, "summary": counts,
            "checks": checks if checks is not None else [r.to_json() for r in results]}


@contextlib.contextmanager
def _report_lock(path: str) -> Iterator[None]:
    """Sessions writing one report take turns: an flock on the report's directory, so
    that no lock file is left beside the report or anywhere else."""
    import fcntl

    try:
        fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    except OSError:
        yield  # the write itself reports what is wrong with the directory
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:  # a filesystem without directory locks (NFS, some FUSE): unlocked
            pass
        yield
    finally:
        os.close(fd)  # releases the lock


class Written(NamedTuple):
    path: str  # where the report went: `path`, or beside it (a conflicting writer)
    said: List[str]  # what the user may not expect (a replaced symlink, a conflict)


def write_report(path: str, report: Dict[str, Any], since: Optional[str] = None) -> List[str]:
    """write_report_to(), for a caller that writes where it is told (the CLI's merge)."""
    return write_report_to(path, report, since).said


def write_report_to(path: str, report: Dict[str, Any], since: Optional[str] = None) -> Written:
    """Atomic (a reader or an interrupted session never sees half a file) and locked:
    the checks of a report that a concurrent session wrote after `since` (our start)
    are kept; an older report is replaced. A concurrent report that cannot be merged
    without losing a verdict (another commit's, or one holding checks we ran too) is
    left as it is, and ours goes beside it, said with the other writer's name: two
    sessions never replace each other's verdicts silently. Also said: a symlink or a
    read-only file at the path is replaced by a new 0600 file, never written through;
    an unreadable report there (damaged, crafted) is replaced."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    said: List[str] = []
    with _report_lock(path):
        if since is not None:
            old = _existing(path, said)
            if (isinstance(old, dict) and old.get("schema") == SCHEMA and
                    str(old.get("created", "")) >= since):
                clash = _clash(report, old)
                if clash is None:
                    report = _with_concurrent(report, old)
                else:
                    mine, path = path, _beside(path, report)
                    said.append(f"{mine} was written while this session ran by {clash}; "
                                f"merged, one session's verdicts would replace the other's, so "
                                f"it is left as it is and this session's report is {path} "
                                f"(`pytest-compilecache merge` joins reports of one commit)")
        said += replaced(path)
        write_json_streamed(Path(path), report, "checks")
    return Written(path, said)


def _existing(path: str, said: List[str]) -> Any:
    """The report at `path` (None when there is none); an unreadable one (damaged,
    crafted: too deep, too large) is said and counts as none, never the session's loss."""
    try:
        return jsonfile.load(path)
    except FileNotFoundError:
        return None
    except (OSError, jsonfile.Unreadable) as e:
        said.append(f"the report already at {path} could not be merged into ({e}); it was "
                    f"replaced by this session's")
        return None


def writer(commit: Optional[Dict[str, Any]], started: str) -> Dict[str, Any]:
    """Who writes a report: named to a concurrent session whose report it would clash with."""
    import socket

    return {"pid": os.getpid(), "host": socket.gethostname(), "started": started,
            "commit": (commit or {}).get("short") or "unknown",
            "dirty": bool((commit or {}).get("dirty"))}


def _same_commit(x: Any, y: Any) -> bool:
    a, b = _dict(x), _dict(y)
    return a.get("sha") == b.get("sha") and bool(a.get("dirty")) == bool(b.get("dirty"))


def _clash(report: Dict[str, Any], old: Dict[str, Any]) -> Optional[str]:
    """The other writer of `old`, named with why merging would lose a verdict, or None
    when merging loses nothing (one commit, no check in both)."""
    checks = report["checks"]
    mine = (set(checks.ids) if isinstance(checks, Streamed) else
            {(c["nodeid"], c.get("via")) for c in checks})
    theirs = [c for c in old.get("checks") or [] if isinstance(c, dict)]
    both = sorted({str(c.get("nodeid")) for c in theirs if (c.get("nodeid"), c.get("via")) in mine})
    other_commit = not _same_commit(report.get("commit"), old.get("commit"))
    if not both and not (other_commit and theirs):
        return None
    w, commit = _dict(old.get("writer")), _dict(old.get("commit"))
    who = (f"another session (pid {w.get('pid', '?')} on {w.get('host', '?')}, started "
           f"{w.get('started', '?')}, commit {commit.get('short', 'unknown')}"
           f"{' dirty' if commit.get('dirty') else ''}; report created {old.get('created')})")
    if both:
        return (f"{who}, which ran {len(both)} of the same check(s) ({', '.join(both[:3])}"
                f"{', ...' if len(both) > 3 else ''})"
                + (" on another commit" if other_commit else ""))
    return f"{who}, on another commit"


def _dict(x: Any) -> Dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _beside(path: str, report: Dict[str, Any]) -> str:
    """Where a report goes when `path` holds a concurrent session's that it clashes
    with: beside it, named by this commit and process."""
    root, ext = os.path.splitext(path)
    short = _dict(report.get("commit")).get("short") or "unknown"
    return f"{root}.{short}-{os.getpid()}{ext or '.json'}"


def _with_concurrent(report: Dict[str, Any], old: Dict[str, Any]) -> Dict[str, Any]:
    """`report` with the checks of `old` (a concurrent session's report) we did not run."""
    checks = report["checks"]
    mine = (set(checks.ids) if isinstance(checks, Streamed) else
            {(c["nodeid"], c.get("via")) for c in checks})
    theirs = [c for c in old.get("checks", []) if (c.get("nodeid"), c.get("via")) not in mine]
    counts = summarize(theirs)
    report = dict(report, checks=Streamed([], lambda: itertools.chain(theirs, checks)),
                  summary={v: n + counts.get(v, 0) for v, n in report["summary"].items()})
    if theirs:  # another session's checks are in it now
        report["no_checks"] = None
    return report


def replaced(path: str) -> List[str]:
    """What writing a new file at `path` does to what is there now."""
    try:
        st = os.lstat(path)
    except OSError:
        return []
    if stat.S_ISLNK(st.st_mode):
        return [f"{path} was a symlink to {os.path.realpath(path)}; it was replaced by a "
                f"regular file (a report is never written through a link)"]
    if stat.S_ISREG(st.st_mode) and not st.st_mode & 0o200:
        return [f"{path} was read-only (mode {stat.S_IMODE(st.st_mode):o}); it was replaced "
                f"by a new file (mode 600)"]
    return []
