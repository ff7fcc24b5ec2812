"""`PreloadedLauncher` (the default launcher): a phase forked from an interpreter that
has imported torch and pytest already (forkserver.py), which saves the interpreter start
and the imports of every phase; where a fork cannot be as fresh as a restart it starts
that phase fresh (launcher.SubprocessLauncher) and says why.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from pytest_compilecache.isolation import CHILD_SPEC_ENV, JOB_ID_ENV, OWNED
from pytest_compilecache.launch.descendants import kill_below
from pytest_compilecache.launch.becoming import THREADS_ENV, VETO, VETO_STATUS, threads_of
from pytest_compilecache.launch.lane import START_TIMEOUT_S, Lane
from pytest_compilecache.launch.launcher import (LaunchResult, SubprocessLauncher, marked)
from pytest_compilecache.launch.state import LauncherState
from pytest_compilecache.leftovers import mark_owner
from pytest_compilecache.lifetime import PHASE_ENV, SESSION_ENV
from pytest_compilecache.owndeps import plugin_only_modules
from pytest_compilecache.launch.phaselog import (CappedLog, open_log, read_start)


# what a phase may differ in from its preloaded interpreter, besides what torch reads at
# import: read by C libraries at load (OpenMP, the loader, the interpreter's start)
_READ_AT_LOAD = ("OMP_", "KMP_", "GOMP_", "MKL_", "LD_", "MALLOC_", "GLIBC_", "PYTHON")
# what differs between phases by design: what the plugin sets per check, the GPU, the test
_PER_PHASE = (*OWNED, "CUDA_VISIBLE_DEVICES", "PYTEST_CURRENT_TEST", PHASE_ENV)
# the plugin's own variables (its session's dirs, its limits): read by no library
OWN_PREFIX = "PYTEST_COMPILECACHE_"


class PreloadedLauncher:
    """Phases forked from preloaded interpreters, one per lane: the session puts a
    check's cold phase and its others on different lanes, so that they differ as two
    restarts do (each interpreter has its own str hash seed). A phase runs fresh, with
    the reason in `fresh_because`, where a fork would not be as fresh as a restart: an
    environment variable torch read at import differs, the preload touched CUDA or
    started Python threads, a preloaded package would be imported from elsewhere.
    Phases run side by side (controller/ahead.py) hold a lane each (`widen`); a phase
    that asks for a lane another phase holds runs fresh and says so."""

    LANES = 2

    def __init__(self, state: Optional[LauncherState] = None) -> None:
        self.state = state  # what the last session preloaded, bytecode (launch/state.py)
        self.needed: List[str] = []  # what this session's tests asked for (collected, learned)
        self.fresh = SubprocessLauncher()
        self._lanes: Dict[int, Lane] = {}
        self._home: Optional[Path] = None
        self.off: Optional[str] = None  # why no phase is forked any more
        self.extras: List[str] = []  # installed libraries the test modules import
        self.dropped: Optional[str] = None  # why the extras are not preloaded after all
        # (name, time.time()): the interpreters' imports, the preloads sent (the timeline)
        self.marks: List[Tuple[str, float]] = []
        self.width = self.LANES  # interpreters to start: widen()
        self._lane_env: Dict[int, Dict[str, str]] = {}  # by lane: over the session's (widen)
        self._started: Optional[Tuple[Dict[str, str], str, Optional[Path]]] = None
        self._started_state: Tuple[Any, ...] = ()  # process_state() as they started
        self._lock = threading.Lock()  # phases may run side by side, a lane each (widen)
        self._in_run: Set[int] = set()  # the threads in run(): their phases, forked or fresh
        self._busy: Dict[int, threading.Lock] = {}  # by lane: held while it serves a phase
        self.closed = False

    def start(self, env: Mapping[str, str], cwd: str) -> None:
        """Start the preloaded interpreters now (they import while pytest collects).
        Started already (before the conftests loaded: controller/early.py), they go on
        where `env` and `cwd` are those they started with, but for the plugin's own
        variables, which no library reads; else they start again."""
        if self._started is not None and self._lanes:
            same = _theirs_but_ours(self._started[0], _base(env)) and self._started[1] == cwd
            if same and self._started_state == process_state():
                return
            self._stop_lanes()
        self._ensure_started(env, cwd)

    def _ensure_started(self, env: Mapping[str, str], cwd: str) -> None:
        if self._lanes or self.off or not hasattr(os, "fork") or not hasattr(os, "wait4"):
            return
        self._home = Path(tempfile.mkdtemp(prefix="pytest-compilecache-lanes-"))
        mark_owner(self._home)  # a killed session's is found by `clean`
        bytecode = None
        if self.state is not None:  # the last session's libraries, before collection ends
            self.extras += [m for m in self.state.preloads() if m not in self.extras]
            bytecode = self.state.bytecode_dir()
        self._started = (_base(env), cwd, bytecode)
        self._started_state = process_state()
        self._start_lanes()

    def narrow(self, lanes: int) -> None:
        """Before start(): `lanes` interpreters, not LANES, where a check has fewer phases
        (a recording of keys: one; ahead.py widens for recordings side by side). Each
        interpreter imports torch and its compile stack (~5 CPU-s on a 2-core machine);
        a lane asked for after all starts then (_why_fresh)."""
        if not self._lanes:
            self.width = max(1, lanes)

    def widen(self, lanes: int, env: Optional[Mapping[str, str]] = None,
              first: int = 0) -> None:
        """An interpreter for each of `lanes` phases that run at once (lane k for the
        k-th: controller/ahead.py), those missing started now; those from `first` on
        start with `env` over the session's (a rank's share of the threads, which
        OpenMP reads as it loads: controller/fleet.py), where not started already."""
        for i in range(first, lanes):
            if env and i not in self._lanes:
                self._lane_env.setdefault(i, dict(env))
        self.width = max(self.width, lanes)
        if self._lanes and not self.off:
            self._start_lanes()

    def _start_lanes(self) -> None:
        assert self._started is not None and self._home is not None
        base, cwd, bytecode = self._started
        for i in range(self.width):
            if i not in self._lanes:
                self._lanes[i] = Lane({**base, **self._lane_env.get(i, {})}, cwd,
                                      self._home, i, self.extras,
                                       bare=self.dropped is not None, bytecode=bytecode)

    def preload(self, modules: Sequence[str]) -> None:
        """Import these too, in the interpreters started or to start."""
        with self._lock:  # one phase's thread at a time learns what another's imported
            self.needed += [m for m in dict.fromkeys(modules) if m not in self.needed]
            new = [m for m in dict.fromkeys(modules) if m not in self.extras]
            self.extras += new
            if new and self.dropped is None:
                self.marks.append(("preload sent", time.time()))
                for server in list(self._lanes.values()):
                    server.preload(new)

    def run(self, argv: Sequence[str], env: Mapping[str, str], cwd: str, log_path: Path,
            timeout: Optional[float], lane: int = 0) -> LaunchResult:
        # a forked phase's start-up includes the wait for its interpreter's imports
        asked = (time.perf_counter(), time.time())
        with self._lock:
            if self.closed:  # a phase started side by side as the session ended: not run
                return LaunchResult(None, False, 0.0, log_path, asked[1], time.time())
            self._in_run.add(threading.get_ident())
            lane = lane if lane in self._lanes else lane % self.LANES
            busy = self._busy.setdefault(lane, threading.Lock())
        mine = busy.acquire(blocking=False)  # an interpreter serves one phase at a time
        try:
            return self._run(argv, marked(env, argv, log_path), cwd, log_path, timeout, lane,
                             asked, None if mine else f"lane {lane}'s preloaded interpreter "
                                                      f"is running another phase")
        finally:
            if mine:
                busy.release()
            with self._lock:
                self._in_run.discard(threading.get_ident())

    def _run(self, argv: Sequence[str], env: Dict[str, str], cwd: str, log_path: Path,
             timeout: Optional[float], lane: int, asked: Tuple[float, float],
             busy: Optional[str]) -> LaunchResult:
        why = self.off or busy or self._why_fresh(argv, env, cwd, lane)
        waited = time.perf_counter() - asked[0]
        if why is None:
            server = self._lanes[lane]
            self.marks += [(f"lane{lane} {name}", at)
                           for name, at in (server.hello or {}).get("marks") or []]
            got = self._fork(server, argv, env, cwd, log_path, timeout, asked)
            if not isinstance(got, str):
                return replace(got, waited_s=round(waited, 3))
            why = got
        launched = self.fresh.run(argv, env, cwd, log_path, timeout)
        return replace(launched, fresh_because=why, waited_s=round(waited, 3))

    def _why_fresh(self, argv: Sequence[str], env: Mapping[str, str], cwd: str,
                   lane: int) -> Optional[str]:
        if not hasattr(os, "fork") or not hasattr(os, "wait4") or list(argv[:2]) != ["-m", "pytest"]:
            return "no fork here"
        self._ensure_started(env, cwd)
        with self._lock:  # narrowed (narrow), and a phase asks for a lane not started
            if lane not in self._lanes:
                self.width = max(self.width, lane + 1)
                self._start_lanes()
        server = self._lanes[lane]
        hello = server.ready()
        if hello.get("problem") and (hello.get("extras") or hello.get("stack")):
            # the compile stack or an extra library touched CUDA or started threads:
            # preload torch alone (from a rank's or ahead.py's thread too: lane.STARTER)
            self.dropped = str(hello["problem"])
            server.close()
            with self._lock:
                server = self._lanes[lane] = Lane(*server.args, bare=True,
                                                   bytecode=server.bytecode)
            hello = server.ready()
        if hello.get("problem"):
            self.off = str(hello["problem"])
            return self.off
        return differs_at_import(server.env, env, hello.get("reads") or {},
                                 hello.get("readers") or {}, hello.get("copies") or [])

    def _fork(self, server: Lane, argv: Sequence[str], env: Mapping[str, str], cwd: str,
              log_path: Path, timeout: Optional[float], asked: Tuple[float, float]) -> Any:
        t0, started_at = asked
        deadline = None if timeout is None else time.perf_counter() + timeout
        try:
            os.close(open_log(log_path))  # the phase appends to it (a cut leaves no hole)
        except OSError:
            pass
        with CappedLog(log_path):
            return self._forked(server, argv, env, cwd, log_path, deadline, t0, started_at)

    def _forked(self, server: Lane, argv: Sequence[str], env: Mapping[str, str], cwd: str,
                log_path: Path, deadline: Optional[float], t0: float, started_at: float) -> Any:
        if self.closed:  # the session ended while this phase waited for its interpreter
            return "the session is over"
        try:
            server.send({"argv": list(argv), "env": dict(env), "cwd": cwd, "log": str(log_path)})
            # a preload queued before it is imported first
            got = server.receive(time.perf_counter() + (START_TIMEOUT_S if server.pending else 60))
            while got is not None and "pid" not in got:
                # the hello of a preload another phase's thread sent before this fork:
                # the server answers in order (a fork it finds unsafe now is vetoed)
                server.took(got)
                got = server.receive(time.perf_counter() + START_TIMEOUT_S)
        except (OSError, ValueError):
            got = None
        if not got or "pid" not in got:
            self.off = "the preloaded interpreter stopped answering"
            return self.off
        pid = int(got["pid"])
        timed_out = False
        try:
            done = self._wait(server, deadline, Path(f"{log_path}.imports"))
            if done is None and not server.gone:  # the deadline passed
                timed_out = True
                _kill_pgid(pid)
                done = server.receive(time.perf_counter() + 30)
        except BaseException:  # KeyboardInterrupt: leave no compile workers behind
            _kill_pgid(pid)
            if threading.current_thread() is threading.main_thread():  # not another's phases
                self.off = "interrupted"
                self.close()
            raise
        _kill_pgid(pid)  # grandchildren (compile workers) may outlive the phase
        if done is None:  # the server died: its phase got the parent-death signal
            self.off = "the preloaded interpreter died"
            return LaunchResult(None, timed_out, time.perf_counter() - t0, log_path,
                                started_at, time.time(), None, forked=True)
        code = os.waitstatus_to_exitcode(int(done["status"]))
        if code == VETO_STATUS:
            line = next((ln for ln in read_start(log_path).splitlines() if ln.startswith(VETO)),
                        None)
            if line is not None:
                return line[len(VETO) + 2:]
        return LaunchResult(code, timed_out, time.perf_counter() - t0, log_path, started_at,
                            time.time(), round(int(done["maxrss_kb"]) / 1024, 1), forked=True,
                            leftovers=[str(x) for x in done.get("leftovers") or []])

    def _wait(self, server: Lane, deadline: Optional[float],
              imports: Optional[Path]) -> Optional[Dict[str, Any]]:
        """The phase's exit status (None: the deadline passed or the server is gone).
        Meanwhile, the installed modules that the phase says it imported lazily (its
        model's library) go to every lane, to be imported before their next fork: the
        other lane does it while this phase still runs."""
        while True:
            if imports is not None and self._learn(imports):
                imports = None
            until = deadline if imports is None else time.perf_counter() + 0.5
            if deadline is not None and until is not None:
                until = min(until, deadline)
            got = server.receive(until)
            if got is not None or server.gone:
                if imports is not None:
                    self._learn(imports)  # written just before the phase ended
                return got
            if deadline is not None and time.perf_counter() >= deadline:
                return None

    def _running_beside(self, me: int) -> bool:
        with self._lock:
            return bool(self._in_run - {me})

    def _learn(self, imports: Path) -> bool:
        if not imports.exists():
            return False
        try:
            learned = json.loads(imports.read_text())
        except (OSError, ValueError):
            learned = []
        self.preload([m for m in learned if isinstance(m, str)])
        return True

    def close(self) -> None:
        """The phases still running (side by side, in a session that stopped early) are
        ended and their runs return first; then the interpreters."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
        self.fresh.close()  # its phases end, and it starts no more
        me, started = threading.get_ident(), time.monotonic()
        while self._running_beside(me) and time.monotonic() - started < 30:
            for server in list(self._lanes.values()):
                kill_below(server.proc.pid)  # the phase it serves, and what that left
                if time.monotonic() - started > 3:  # still in its imports: the lane itself
                    _kill_pgid(server.proc.pid)
            time.sleep(0.05)
        if self.state is not None and self._lanes and self.off is None:
            # for the next session's interpreters to import as they start: what this
            # session preloaded (a phase does not say it imported what was preloaded
            # for it), less what failed to import; where an import made forking unsafe,
            # only what this session's tests asked for
            failed = {m for lane in self._lanes.values() for m in (lane.hello or {}).get(
                "failed") or []}
            kept = self.extras if self.dropped is None else self.needed
            self.state.keep_preloads([m for m in kept if m not in failed])
        self._stop_lanes()

    def _stop_lanes(self) -> None:
        for server in self._lanes.values():
            server.close()
        self._lanes.clear()
        if self._home is not None:
            shutil.rmtree(self._home, ignore_errors=True)
            self._home = None


def process_state() -> Tuple[Any, ...]:
    """What else of this process its interpreters inherit, which an import may read
    (inductor's config counts its compile threads from the CPU affinity): the
    affinity, the umask, the resource limits, the ignored and blocked signals, the
    priority, the OOM score. A conftest that changes one has interpreters started
    before it start again."""
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    try:
        import resource

        limits = tuple(resource.getrlimit(getattr(resource, name))
                       for name in sorted(dir(resource)) if name.startswith("RLIMIT_"))
    except (ImportError, OSError, ValueError):
        limits = ()
    ignored = [s for s in signal.valid_signals() if _ignored(s)]
    blocked = (sorted(signal.pthread_sigmask(signal.SIG_BLOCK, []))
               if hasattr(signal, "pthread_sigmask") else None)
    priority = os.getpriority(os.PRIO_PROCESS, 0) if hasattr(os, "getpriority") else None
    return (affinity, _umask(), limits, ignored, blocked, priority, _oom_score_adj())


def _ignored(signum: int) -> bool:
    try:
        return signal.getsignal(signum) is signal.SIG_IGN
    except (OSError, ValueError):
        return False


def _umask() -> Optional[str]:
    """Read, not set and set back (another thread may be creating a file)."""
    try:
        with open("/proc/self/status") as f:
            return next((ln.split()[1] for ln in f if ln.startswith("Umask:")), None)
    except OSError:
        return None


def _oom_score_adj() -> Optional[str]:
    try:
        with open("/proc/self/oom_score_adj") as f:
            return f.read(64).strip()
    except OSError:
        return None


def _base(env: Mapping[str, str]) -> Dict[str, str]:
    """The interpreters' environment: no check's own (the job id is read again in each
    phase: a config entry)."""
    return {k: v for k, v in env.items()
            if k not in (CHILD_SPEC_ENV, PHASE_ENV) and k not in JOB_ID_ENV}


def _theirs_but_ours(started: Mapping[str, str], now: Mapping[str, str]) -> bool:
    """The same environment but for the plugin's own variables (its session's dirs,
    set at configure after early interpreters started); never without the session's
    mark, by which its watchdog finds what the session started."""
    keys = {k for k in set(started) | set(now)
            if not k.startswith(OWN_PREFIX) or k == SESSION_ENV}
    return all(started.get(k) == now.get(k) for k in keys)


def differs_at_import(server: Mapping[str, str], phase: Mapping[str, str],
                      reads: Mapping[str, bool], readers: Mapping[str, str] = {},
                      copies: Sequence[Mapping[str, str]] = ()) -> Optional[str]:
    """Why a phase with `phase` as its environment cannot be forked from an interpreter
    that imported torch with `server`'s: a variable it read at import (and cannot read
    again: `reads[name]` is False) or that C libraries read at load differs; where an
    import copied the whole environment (`copies`: where, and the module that did), any
    variable but those this plugin and pytest set per phase (no library asks a copy for
    them)."""
    for k in sorted(set(server) | set(phase)):
        if server.get(k) == phase.get(k) or k == "PYTHONPATH":
            continue
        if k in reads and not reads[k]:
            at = f" ({readers[k]})" if readers.get(k) else ""
            return f"{k} differs from the preloaded interpreter's, and it was read at import{at}"
        settable = k == THREADS_ENV and threads_of(phase.get(k)) is not None
        if k.startswith(_READ_AT_LOAD) and not settable:  # (settable: becoming.set_threads)
            return f"{k} differs from the preloaded interpreter's (read when libraries load)"
        own = k in _PER_PHASE or k in JOB_ID_ENV or k.startswith(OWN_PREFIX)
        if copies and not own:
            return (f"{k} differs from the preloaded interpreter's, and {_copier(copies[0])} "
                    f"copied the whole environment ({copies[0].get('where')})")
    return None


def _copier(copy: Mapping[str, str]) -> str:
    """Whose import copied the environment: only the tests' are preloaded, and one of
    the plugin's own dependencies only where the tests import it too (owndeps.py)."""
    module = copy.get("module")
    if not module:
        return "an import"
    if module in plugin_only_modules():
        return f"importing {module} (pytest-compilecache's own dependency, which the tests import too)"
    return f"importing {module} (one of the tests' libraries)"


def _kill_pgid(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
