"""Rendering: the failure text of one check, the end-of-session summary table and
the versioned JSON report. Pure functions from CheckResult to lines / dicts."""
from __future__ import annotations

import contextlib
import datetime as _dt
import itertools
import os
import stat
from collections import Counter
from pathlib import Path
from typing import (Any, Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional,
                    Sequence, Tuple)

from pytest_compilecache import jsonfile
from pytest_compilecache.files import write_json_streamed
from pytest_compilecache.judge import recompiles
from pytest_compilecache.history.manifest import changed_components, drift_lines
from pytest_compilecache.layers import LAYERS, SHORT
from pytest_compilecache.model import CheckResult

SCHEMA = "pytest-compilecache/report"
# 2: the verdict n/a (a warm-start path torch or the workload cannot take), its count
# 3: a graph row that needs no explaining keeps its components' digest, not them
#    (judge/keyed.graph_rows); versions 1 and 2 are still read
SCHEMA_VERSION = 3


def now() -> str:
    """Milliseconds: a session that starts in the same second as another one wrote the
    report must not take that report for a concurrent one and merge it."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def _s(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.1f}"


def ratio(result: CheckResult) -> Optional[float]:
    """warm/cold, or None where cold shows as 0.0 s (nothing compiled): a ratio of two
    near-zero times says nothing."""
    c, w = result.timings.get("cold_s"), result.timings.get("warm_s")
    return None if c is None or c < 0.05 or w is None else w / c


def first_reason(r: CheckResult, width: int = 300) -> str:
    """One line: why the check did not pass (the short test summary, JUnit's message)."""
    text = r.problems[0] if r.problems else next(
        (line.strip() for line in (r.error or "").splitlines() if line.strip()), r.verdict)
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"


def failure_lines(r: CheckResult) -> List[str]:
    where = ", ".join(x for x in (r.device_name or r.device, _torch(r)) if x)
    lines = [f"compile-cache check {r.verdict.upper()}: {r.label}" + (f" ({where})" if where else "")]
    other = [p for p in r.problems if p.split(":")[0] not in LAYERS]
    if r.verdict == "error" and other and not r.error:  # the cause (a full disk) before the table
        lines += ["", *[f"  {p}" for p in other]]
        other = []
    if r.error:
        if other:  # the cause first (a damaged cache), then the failure it led to
            lines += ["", *[f"  {p}" for p in other], "", "  which led to:"]
            other = []
        lines += ["", *r.error.splitlines()]
    if r.layers:
        w = max(7, *(len(r.layers[n].state) for n in LAYERS))  # `accepted` is 8
        lines += ["", f"  {'layer':<13} {'state':<{w}} {'cold':<24} {'warm':<24}"]
        for name in LAYERS:
            lv = r.layers[name]
            lines.append(f"  {name:<13} {lv.state:<{w}} {lv.cold:<24} {lv.warm:<24}")
        # a layer that missed, and one a setting switched off (named with where it was set)
        why = [(n, reason) for n in LAYERS for reason in r.layers[n].reasons
               if r.layers[n].state in ("miss", "bypass", "accepted")
               or (r.layers[n].state == "off" and r.layers[n].setting)]
        if why:
            lines += ["", "  why:"]
            lines += [f"  - {n}: {reason}" for n, reason in why]
        for n in LAYERS:
            for f in r.layers[n].files[:8]:
                lines.append(f"    warm wrote ({n}): {f}")
        for row in r.graphs:
            if row.get("graph_code_diff"):
                lines += ["", f"  graph code diff, {row['layer']} graph {row['compile_id']}:"]
                lines += ["    " + x for x in row["graph_code_diff"]]
    if other:
        lines += ["", *[f"  {p}" for p in other]]
    out = r.outputs or {}
    if out.get("warm_vs_cold"):
        c = out["warm_vs_cold"]
        lines.append(f"  outputs: warm vs cold ({c.get('mode')}): "
                     f"{'equal' if c.get('ok') else 'DIFFER'} ({c.get('compared')} compared)")
    e = out.get("warm_vs_eager") or {}
    if e.get("rule"):
        worst = (e.get("float64") or {}).get("worst")
        judged = eager_coverage(r)
        lines.append(f"  outputs: warm compiled vs eager ({e['rule']}): "
                     f"{'close' if e.get('ok') else 'DIFFER'}" + (f"; {judged}" if judged else "")
                     + (f"; furthest from float64: {worst['name']}, RMSE {worst['rmse']:.3g} vs "
                        f"eager's {worst['reference_rmse']:.3g} (allowed {worst['limit']:.3g})"
                        if worst else ""))
    fresh = out.get("fresh_vs_warm") or {}
    if fresh.get("mode"):  # a path's reference (the deploy scenario: this commit compiled afresh)
        lines.append(f"  outputs: warm vs a fresh compile ({fresh['mode']}): "
                     f"{'equal' if fresh.get('ok') else 'DIFFER'} "
                     f"({fresh.get('compared')} compared)")
    lines += _drift_lines(r)
    job = (r.job_id or {}).get("warm")
    pgo = r.layers.get("dynamo_pgo")
    if job and pgo is not None and pgo.state == "miss":
        lines.append(f"  PGO job id: {job['value']!r} ({job.get('source')})" if job.get("value")
                     else "  PGO job id: none (not in the environment, not set in code)")
    lines += [f"  note: {n}" for n in r.notes]
    if r.timings.get("cold_s") is not None:
        lines.append(f"  compile+run: cold {_s(r.timings.get('cold_s'))} s, warm "
                     f"{_s(r.timings.get('warm_s'))} s")
    if r.cache_root:
        lines.append(f"  cache root kept: {r.cache_root}")
    return lines


def eager_coverage(r: CheckResult, partial_only: bool = False) -> Optional[str]:
    """How much of the check compiled vs eager judged, in a few words: "3 of 11 tensors
    compared (8 change with the random seed)". A check that passes with most of its
    tensors unjudged by eager (dropout, a training step) must say so where it is read,
    not only in the JSON report. `partial_only`: None where eager judged them all."""
    out = r.outputs or {}
    e = out.get("warm_vs_eager") or out.get("cold_vs_eager") or {}
    total, compared = e.get("total"), e.get("compared")
    if e.get("ok") is None and e.get("note"):
        return "eager judged nothing: " + _cut(str(e["note"]).splitlines()[0], 160)
    if not isinstance(total, int) or not isinstance(compared, int) or total <= 0:
        return None
    if compared >= total:
        return None if partial_only else (f"all {total} tensors compared" if total > 1
                                          else "its 1 tensor compared")
    seeded = len(out.get("random") or []) or e.get("random_count") or len(e.get("random") or [])
    why = f" ({seeded} change{'s' if seeded == 1 else ''} with the random seed)" if seeded else ""
    of = f"of {total} tensor{'s' if total > 1 else ''} compared"
    if compared == 0:
        return f"0 {of}: eager judged nothing{why}"
    return f"{compared} {of}{why}"


def _drift_lines(r: CheckResult) -> List[str]:
    out: List[str] = []
    if r.drift and r.drift.get("status") not in (None, "unchanged"):
        out += ["", f"  keys against the baseline {r.drift.get('base')}:"]
        out += ["  " + x for x in drift_lines(r.nodeid, r.drift)]
    if r.repeat and r.repeat.get("status") == "nondeterministic":
        out += ["", "  keys of a second cold run (relocated cache root and working directory):"]
        out += ["  " + x for x in drift_lines(r.nodeid, {**r.repeat, "status": "differ"})[1:]]
    return out


def _torch(r: CheckResult) -> str:
    v = (r.versions or {}).get("torch")
    return f"torch {v}" if v else ""


def row_cells(r: CheckResult) -> Tuple[List[str], Tuple[str, str, str]]:
    """One check's row of the summary table (terminal and job summary): each layer's
    state, then cold s, warm s, warm/cold."""
    q = ratio(r)
    return ([r.layers[n].state if n in r.layers else "-" for n in LAYERS],
            (_s(r.timings.get("cold_s")), _s(r.timings.get("warm_s")),
             "-" if q is None else f"{q:.2f}"))


FOLDED = ("pass", "recorded")  # under -q, counted rather than listed


def summary_lines(results: Sequence[CheckResult], quiet: bool = False) -> List[str]:
    """The terminal summary: failing and erroring checks first, then the rest in the order
    they ran; `quiet` (-q) folds the passing and recorded ones into one count, so that a
    session of hundreds of checks shows what needs reading."""
    if not results:
        return []
    first = [r for r in results if r.verdict in ("fail", "error")]
    results = first + [r for r in results if r.verdict not in ("fail", "error")]
    folded = [r for r in results if quiet and r.verdict in FOLDED]
    if folded:
        results = [r for r in results if r.verdict not in FOLDED]
    lines = _table(results) + _folded_line(folded)
    lines += _eager_lines(results, folded)
    lines += _accepted_lines(results, folded)
    lines += _sections(results)
    devices = sorted({r.device for r in [*results, *folded] if r.device})
    if devices == ["cpu"]:
        lines.append("note: checks ran on CPU (no CUDA device in the check process, or "
                     "--compile-cache-device=cpu); Triton and GPU autotune layers were not exercised")
    return lines


def _folded_line(folded: Sequence[CheckResult]) -> List[str]:
    if not folded:
        return []
    counts = Counter(r.verdict for r in folded)
    said = " and ".join(f"{n} {'passed' if v == 'pass' else v}" for v, n in sorted(counts.items()))
    return [f"... and {len(folded)} more check(s): {said} (listed without -q)"]


def _accepted_lines(results: Sequence[CheckResult], folded: Sequence[CheckResult]
                    ) -> List[str]:
    """Each listed check's accepted warm-start cost, one line per layer (what it costs
    stays in sight although it no longer fails); the folded ones counted."""
    lines = [f"accepted: {r.label}: {n} ({lv.accepted}): "
             + _cut(lv.reasons[1] if len(lv.reasons) > 1 else "", 200)
             for r in results for n, lv in r.layers.items() if lv.state == "accepted"]
    hidden = sum(1 for r in folded if any(lv.state == "accepted" for lv in r.layers.values()))
    if hidden:
        lines.append(f"... of which {hidden} passed with an accepted warm-start cost "
                     f"(listed without -q)")
    return lines


def _eager_lines(results: Sequence[CheckResult], folded: Sequence[CheckResult]) -> List[str]:
    """Each listed check whose eager comparison judged only part of its tensors, one
    line each (a failing one says it in its report too); the folded ones counted."""
    lines = [f"{r.label}: outputs: warm compiled vs eager: {said}" for r in results
             if r.verdict not in ("fail", "error")
             for said in [eager_coverage(r, partial_only=True)] if said]
    partial = sum(1 for r in folded if eager_coverage(r, partial_only=True))
    if partial:
        lines.append(f"... of which {partial} compared only part of their tensors with eager "
                     f"(listed without -q)")
    return lines


def _table(results: Sequence[CheckResult]) -> List[str]:
    if not results:
        return []
    width = min(60, max(len("check"), *(len(r.label) for r in results)))
    head = f"{'check':<{width}} {'verdict':<7} " + " ".join(
        f"{SHORT[n]:<8}" for n in LAYERS) + f" {'cold s':>7} {'warm s':>7} {'warm/cold':>9}"
    lines = [head]
    for r in results:
        name = r.label if len(r.label) <= width else "…" + r.label[-(width - 1):]
        states, (cold, warm, q) = row_cells(r)
        cells = " ".join(f"{c:<8}" for c in states)
        lines.append(f"{name:<{width}} {r.verdict:<7} {cells} {cold:>7} {warm:>7} {q:>9}")
    return lines


def _sections(results: Sequence[CheckResult]) -> List[str]:
    """What follows the table, for the checks it lists: the warm start by path, the
    recompiles, the drift against the baseline."""
    lines: List[str] = []
    paths = warm_start_by_path(results)
    if paths:
        widths = _widths(paths)
        lines += ["", WARM_START_TITLE]
        lines += ["  ".join(f"{c:<{w}}" for c, w in zip(row, widths)).rstrip()
                  for row in [paths[0], *paths[1]]]
        lines += [f"n/a: {r.label}: " + _cut(r.notes[0] if r.notes else "", 240)
                  for r in results if r.verdict == "n/a"]
    recompiled = [(r, line) for r in results for line in recompiles.lines(r.dynamo or {})]
    if recompiled:
        lines += ["", RECOMPILES_TITLE]
        lines += [f"  {r.label}: {line}" for r, line in recompiled]
    drifted = [r for r in results if r.drift]
    if drifted:
        lines.append(f"keys against the baseline {drifted[0].drift.get('base')}:")
        for r in drifted:
            changed = changed_components(r.drift)
            lines.append(f"  {r.drift.get('status'):<9} {r.nodeid}" +
                         (f"  ({', '.join(changed[:6])})" if changed else ""))
    return lines


RECOMPILES_TITLE = ("recompiles (Dynamo traced a code object more than once; every restart "
                    "traces it again, cache or not):")
WARM_START_TITLE = ("warm start by path, seconds from loading the artifact to the first "
                    "result (the local restart: its warm run):")


def warm_start_seconds(r: CheckResult) -> str:
    """One cell of the per-path table: the warm run's seconds, or why there are none."""
    if r.verdict in ("n/a", "error", "not run"):
        return r.verdict
    w = r.timings.get("warm_s")
    return ("-" if w is None else f"{w:.1f}") + (" (fail)" if r.verdict == "fail" else "")


def warm_start_by_path(results: Sequence[CheckResult]
                       ) -> Optional[Tuple[List[str], List[List[str]]]]:
    """A check per row, a warm-start path per column: what each deployment path buys on
    this model. None when only the local restart ran, or no check is listed (under -q
    every one passed)."""
    vias = list(dict.fromkeys(r.via for r in results))
    if vias in ([], ["local"]):
        return None
    cells: Dict[str, Dict[str, str]] = {}
    for r in results:
        cells.setdefault(r.nodeid, {})[r.via] = warm_start_seconds(r)
    return (["check", *vias],
            [[nodeid, *(row.get(v, "-") for v in vias)] for nodeid, row in cells.items()])


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _widths(table: Tuple[List[str], List[List[str]]]) -> List[int]:
    head, rows = table
    return [min(60, max(len(x[i]) for x in [head, *rows])) for i in range(len(head))]


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
            if isinstance(old, dict) and old.get("schema") == SCHEMA and \
                    str(old.get("created", "")) >= since:
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
    mine = set(checks.ids) if isinstance(checks, Streamed) else \
        {(c["nodeid"], c.get("via")) for c in checks}
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
    mine = set(checks.ids) if isinstance(checks, Streamed) else \
        {(c["nodeid"], c.get("via")) for c in checks}
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
