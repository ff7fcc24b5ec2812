"""What a finished phase process amounts to: its record, its timings, and, when it gave
no usable record, the error that names why (a timeout, a full disk, a kill by the OOM
killer, a crash, its caches outside the private root, the workload's exception). And a
check whose phase could not save its caches: an environment error, not a verdict."""
from __future__ import annotations

import signal
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from pytest_compilecache import jsonfile
from pytest_compilecache.controller import diskspace
from pytest_compilecache.isolation import CacheRoot
from pytest_compilecache.judge import confinement
from pytest_compilecache.model import OK_VERDICTS, CheckResult, error_result
from pytest_compilecache.wire import PhaseRecord

# how running out of memory reads in a phase's error (Python, torch's CPU allocator, CUDA)
_OUT_OF_MEMORY = ("MemoryError", "can't allocate memory", "OutOfMemoryError", "out of memory")


def phase_outcome(nodeid: str, phase: str, root: CacheRoot, out: Path, launched: Any,
                  timings: Dict[str, Optional[float]], limit: Any, notes: List[str]
                  ) -> Tuple[Optional[PhaseRecord], Optional[CheckResult]]:
    """The phase's record, read once here and typed from here on (None: it left none),
    and, if it failed, its error result; its timings go into `timings`, what the child
    put back of the test's cache settings into `notes`."""
    memory = (f"peak resident memory {launched.peak_rss_mb:.0f} MB"
              if launched.peak_rss_mb is not None else "peak resident memory unknown")
    timings[f"{phase}_process_s"] = round(launched.wall_s, 3)
    timings[f"{phase}_peak_rss_mb"] = launched.peak_rss_mb
    if getattr(launched, "waited_s", 0.0):  # of its start-up: the preloaded imports
        timings[f"{phase}_wait_s"] = launched.waited_s
    rec: Optional[PhaseRecord] = None
    if out.exists():
        try:  # bounded and validated as every file from outside this process (jsonfile.py)
            raw = jsonfile.load(out)
            if not isinstance(raw, dict):
                raise ValueError(f"{out}: a JSON {type(raw).__name__}, not a phase record")
            rec = PhaseRecord.from_json(raw) if raw else None  # {}: wrote nothing of use
        except (OSError, ValueError, TypeError) as e:  # a phase killed mid-write
            return None, error_result(nodeid, phase, f"left a record that cannot be read "
                                      f"({e})", launched.tail(), timings)
        if rec is not None:
            timings[f"{phase}_s"] = rec.cache.wall_s
            for stage, secs in launched.stages(rec.marks if isinstance(rec.marks, dict)
                                               else {}).items():
                timings[f"{phase}_{stage}_s"] = secs
    if launched.timed_out:
        why = (f"timed out after {limit.seconds:.0f} s and was killed with its "
               f"process group ({limit.said})")
        return rec, error_result(nodeid, phase, why, launched.tail(), timings)
    error = str(rec.error) if rec is not None and rec.error else ""
    if rec is None or error:  # a full disk is named before anything it caused
        full = diskspace.out_of_space(phase, root.path, root.phases / f"{phase}.log",
                                      error + "\n" + launched.tail())
        if full:  # the environment's: an error whatever a path makes of a failed phase
            failed = error_result(nodeid, phase, full, launched.tail(), timings)
            failed.fault = True
            return rec, failed
    if rec is None:
        code = launched.returncode
        if code == -signal.SIGKILL:
            why = (f"was killed with SIGKILL without a result: out of memory? (the kernel's "
                   f"OOM killer sends SIGKILL; {memory})")
        else:
            why = f"crashed or exited early (exit code {code}) without a result ({memory})"
        return None, error_result(nodeid, phase, why, launched.tail(), timings)
    notes.extend(str(n) for n in rec.reclaimed or [] if str(n) not in notes)
    if rec.escaped:
        return rec, error_result(nodeid, phase, confinement.escaped(list(map(str, rec.escaped))),
                                 "", timings)
    if error:
        text = error.rstrip()
        oom = next((m for m in _OUT_OF_MEMORY if m in text or m in launched.tail()), None)
        why = (f"ran out of memory ({oom}; {memory}):\n" if oom else "failed:\n") + text
        return rec, error_result(nodeid, phase, why, "" if rec.ran else launched.tail(),
                                 timings)
    return rec, None


def blame_full_disk(result: CheckResult, recs: Dict[str, PhaseRecord],
                    logs: Dict[str, Path]) -> None:
    """A check that did not pass because a phase could not save its caches (a disk
    briefly full: torch logs the write error and goes on, and the next phase rebuilds
    what is missing) is an `error` naming that, not a miss of the model's."""
    if result.verdict in OK_VERDICTS:
        return
    for phase, log in logs.items():
        lines = diskspace.full_lines(log)
        errors = (recs[phase].cache.counter("inductor", "fxgraph_cache_write_error")
                  if phase in recs else 0)
        if lines or errors:
            said = lines[0] if lines else f"torch counted {errors} FX graph write error(s)"
            result.problems.insert(0, (
                f"the {phase} phase could not save all of its caches ({said}; log: {log}): a "
                f"full disk or a write the filesystem refused, an environment problem, not the "
                f"model; what follows is its consequence, not a verdict on the model"))
            result.fault = True
            result.finalize()
            return
