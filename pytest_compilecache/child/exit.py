"""How a phase process ends once its record is written: at once, without pytest's
summary or the interpreter's teardown of torch, but with the atexit handlers that may
save cache state (all but the join of torch's compile-worker pool); and what one that
hangs leaves before the launcher kills it (its threads' stacks)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def exit_now(status: int) -> None:
    """The result is written: skip pytest's summary and the interpreter's teardown of
    torch's modules (2-3 s a phase on CPU), but run the atexit handlers, which is where
    torch shuts its compile pools down and could dump a cache. A check that failed to run
    exits normally, so its log keeps pytest's account of why."""
    import atexit
    import sys

    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    skip_worker_pool_join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(status)


def skip_worker_pool_join() -> None:
    """torch joins its compile-worker pool at exit. A warm phase compiles nothing, so the
    pool it started (one worker per core, each importing torch) is often still starting
    when the phase is done, and the join waited 5-9 s after warm inference phases on an
    H100 (about 1 s after cold ones). The workers hold nothing to save (results come back
    to this process, which writes the caches); the launcher kills the process group next.
    Only this handler is skipped: the others may write cache state."""
    import atexit
    import sys

    mod = sys.modules.get("torch._inductor.async_compile")
    handler = getattr(mod, "shutdown_compile_workers", None)
    if handler is not None:
        atexit.unregister(handler)


def stack_before_timeout(timeout_s: Any) -> None:
    """Shortly before the launcher kills a hung phase (--compile-cache-timeout, counted
    from the process's start), write every thread's stack to stderr: the timeout's
    message quotes the log's tail, and a phase that hangs has often said nothing there
    (its logging is held by pytest's capture until the test ends, which it never does)."""
    import faulthandler

    if not timeout_s:
        return
    elapsed = 0.0
    try:  # since this process started (a fork of a preloaded interpreter, or an exec)
        stat = Path("/proc/self/stat").read_text()
        ticks = int(stat[stat.rindex(")") + 2:].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        elapsed = max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        pass
    margin = min(5.0, 0.2 * float(timeout_s))
    at = float(timeout_s) - elapsed - margin
    if at > 0:
        faulthandler.dump_traceback_later(at, exit=False, file=2)  # fd 2: the phase log
