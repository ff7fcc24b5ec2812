"""A launcher that starts no process: it replays the phase records of
tests/data/records/ (their README says how each was made) where a phase child would
have written them, so the controller's rules run exactly as in a real session, in
milliseconds.

`ReplayLauncher` implements `launch.launcher.Launcher`. For each phase it is asked to
run it reads the phase's spec (the file `CHILD_SPEC_ENV` names, as the child does),
makes the cache root's watched dirs hold the files of the record's snapshot of that
phase (same paths and sizes; the C++ sources the artifact judge reads with their
recorded head), writes the phase record to the spec's `out` and a log, and returns a
`LaunchResult` with the recorded process's wall time, peak memory, start and end (so
the timings the controller derives are the session's). What a test wants to change
about a phase (a record with an error, a phase that timed out, a crash without a
record) it passes as `replies`. `SessionReplay` replays a record per check, and
`UseLauncher` hands a launcher to the session of a pytest run (pytester).
"""
from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import pytest

from pytest_compilecache.isolation import CHILD_SPEC_ENV
from pytest_compilecache.launch.launcher import LaunchResult

RECORDS = Path(__file__).parent / "data" / "records"


# a marked test file for a replayed check (no torch: its phases are replayed)
MARKED = """
import pytest


@pytest.mark.compile_cache
def {name}():
    pass
"""


def load_record(case: str) -> Dict[str, Any]:
    """A fresh copy of `tests/data/records/<case>.json` (a test may change it)."""
    return json.loads((RECORDS / f"{case}.json").read_text())


@dataclass
class Reply:
    """How one phase ends, instead of as recorded. `record`: the phase record written
    (None: none is written, as a child that crashed before writing it); `files`: the
    snapshot the cache root holds afterwards (default: the record's for the phase)."""
    record: Optional[Dict[str, Any]] = None
    files: Optional[Dict[str, int]] = None
    returncode: Optional[int] = 0
    timed_out: bool = False
    log: str = ""
    leftovers: List[str] = field(default_factory=list)
    raw: Optional[str] = None  # the record file's text as written (a process killed mid-write)


@dataclass
class Launched:
    """What the launcher was asked: one phase."""
    phase: str
    spec: Dict[str, Any]
    env: Dict[str, str]
    cwd: str
    lane: int
    timeout: Optional[float] = None


class _Lifecycle:
    """The Launcher protocol's start, preload and close, noted for the tests to read."""
    started = closed = False
    preloaded: List[str]

    def start(self, env: Mapping[str, str], cwd: str) -> None:
        self.started = True

    def preload(self, modules: Sequence[str]) -> None:
        self.preloaded.extend(modules)

    def close(self) -> None:
        self.closed = True


class ReplayLauncher(_Lifecycle):
    """Replays `record` (one of tests/data/records/*.json, as `load_record` reads it):
    its `recs[phase]` and `snaps[phase]` for each phase the controller runs. A phase the
    record lacks takes the record of `stands_for[phase]` (the repeat run and the deploy
    path's fresh phase are cold runs; by default `repeat` -> `cold`, `fresh` -> `cold`).
    `replies[phase]` overrides a phase; a callable is called with the phase's spec."""

    def __init__(self, record: Dict[str, Any],
                 replies: Optional[Mapping[str, Any]] = None,
                 stands_for: Optional[Mapping[str, str]] = None) -> None:
        self.record = record
        self.replies: Dict[str, Any] = dict(replies or {})
        self.stands_for = {"repeat": "cold", "fresh": "cold", **(stands_for or {})}
        self.launched: List[Launched] = []
        self.started = self.closed = False
        self.preloaded: List[str] = []

    # -- the Launcher protocol: start, preload and close from _Lifecycle ----------------------
    def run(self, argv: Sequence[str], env: Mapping[str, str], cwd: str, log_path: Path,
            timeout: Optional[float], lane: int = 0) -> LaunchResult:
        spec = json.loads(Path(env[CHILD_SPEC_ENV]).read_text())
        phase = spec["phase"]
        self.launched.append(Launched(phase, spec, dict(env), cwd, lane, timeout))
        reply = self.replies.get(phase)
        if callable(reply):
            reply = reply(spec)
        if reply is None:
            reply = Reply(record=self.phase_record(phase))
        root = Path(spec["root"])
        watched = {label: root / label for label in ("inductor", "triton", "tmp")}
        files = reply.files if reply.files is not None else self.snapshot(phase)
        _lay_out(watched, files, self.record.get("sources") or {})
        if reply.record is not None:
            rec = copy.deepcopy(reply.record)
            art = rec.get("artifact")
            if isinstance(art, dict) and art.get("watched") is not None:
                # the artifact judge reads the warm process's C++ sources from its root
                art["watched"] = {k: str(v) for k, v in watched.items()}
            Path(spec["out"]).write_text(json.dumps(rec))
        if reply.raw is not None:
            Path(spec["out"]).write_text(reply.raw)
        log_path.write_text(reply.log)
        # the recorded process's wall time, peak memory, start and end, so that the
        # timings the controller derives (phase_outcome) are the session's
        t = self.record.get("timings") or {}
        src = self._recorded(phase)
        marks = (reply.record or {}).get("marks") or {}
        started = marks["configured"] - t[f"{src}_startup_s"] \
            if "configured" in marks and t.get(f"{src}_startup_s") is not None else 0.0
        ended = marks["written"] + t[f"{src}_exit_s"] \
            if "written" in marks and t.get(f"{src}_exit_s") is not None else 0.0
        return LaunchResult(reply.returncode, reply.timed_out,
                            float(t.get(f"{src}_process_s") or 0.1), log_path,
                            started_at=started, ended_at=ended,
                            peak_rss_mb=t.get(f"{src}_peak_rss_mb"),
                            leftovers=list(reply.leftovers))

    # -- what is replayed --------------------------------------------------------------------
    def _recorded(self, phase: str) -> str:
        recs = self.record["recs"]
        return phase if phase in recs else self.stands_for.get(phase, phase)

    def phase_record(self, phase: str) -> Dict[str, Any]:
        return copy.deepcopy(self.record["recs"][self._recorded(phase)])

    def snapshot(self, phase: str) -> Dict[str, int]:
        return dict(self.record["snaps"].get(self._recorded(phase)) or {})

    def phases(self) -> List[str]:
        return [x.phase for x in self.launched]


def _lay_out(watched: Dict[str, Path], files: Dict[str, int], sources: Dict[str, str]) -> None:
    """Make the watched dirs hold exactly `files` (rel path -> size): what the phase
    wrote, and nothing the snapshot does not have. A recorded source keeps its head."""
    wanted = set(files)
    for label, d in watched.items():
        if not d.is_dir():
            continue
        for dirpath, _, names in os.walk(d):
            for n in names:
                rel = f"{label}/{os.path.relpath(os.path.join(dirpath, n), d)}"
                if rel not in wanted and not os.path.islink(os.path.join(dirpath, n)):
                    os.unlink(os.path.join(dirpath, n))
    for rel, size in files.items():
        label, _, rest = rel.partition("/")
        p = watched[label] / rest
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.exists() and p.stat().st_size == size:
            continue
        head = sources.get(rel, "").encode()[:size]
        with open(p, "wb") as f:
            f.write(head)
            f.truncate(size)


def remove_files(root: Path, match: Callable[[str], bool]) -> List[str]:
    """Delete the files under `root` whose path relative to it `match`es (what the
    recorded sessions' conftests did between the phases); their relative paths."""
    gone = []
    for dirpath, _, names in os.walk(root):
        for n in names:
            full = os.path.join(dirpath, n)
            rel = os.path.relpath(full, root)
            if match(rel):
                os.unlink(full)
                gone.append(rel)
    return sorted(gone)


class SessionReplay(_Lifecycle):
    """A session's launcher: each check's phases replayed from its own record, chosen by
    the node id in the phase's spec (records keyed by their `nodeid`)."""

    def __init__(self, records: Sequence[Dict[str, Any]]) -> None:
        self.by_check = {r["nodeid"]: ReplayLauncher(r) for r in records}
        self.started = self.closed = False
        self.preloaded: List[str] = []

    def run(self, argv: Sequence[str], env: Mapping[str, str], cwd: str, log_path: Path,
            timeout: Optional[float], lane: int = 0) -> LaunchResult:
        nodeid = json.loads(Path(env[CHILD_SPEC_ENV]).read_text())["nodeid"]
        return self.by_check[nodeid].run(argv, env, cwd, log_path, timeout, lane)


class UseLauncher:
    """A plugin that hands the controller's session `launcher` once it is configured
    (the session is registered as "compilecache-session" by the plugin's configure; a
    later configure hook sees it): `pytester.runpytest(..., plugins=[UseLauncher(l)])`."""

    def __init__(self, launcher: Any) -> None:
        self.launcher = launcher
        self.session: Any = None

    @pytest.hookimpl(trylast=True)
    def pytest_configure(self, config: pytest.Config) -> None:
        self.session = config.pluginmanager.get_plugin("compilecache-session")
        self.session.launcher = self.launcher
