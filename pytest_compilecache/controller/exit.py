"""How the controller process ends once its report is out: after the atexit handlers,
without the interpreter's teardown of the modules the tests imported. Collection
imports the test modules, so the controller holds torch (and torchvision, ...) although
it runs no phase; tearing those modules down took 1.5 s after the report on an H200
(resnet18 training) and 0.5-1.4 s on CPU, as long as in a plain pytest session over
the same module. Only where pytest is the program (`pytest ...`, `python -m pytest
...`): pytest.main() in a script, and pytester's in-process runs, return to their
caller, who may still have work to do."""
from __future__ import annotations

import atexit
import gc
import io
import os
import sys
import warnings
from typing import Any, Callable, Optional, Sequence


def pytest_is_the_program(args: Sequence[str]) -> bool:
    """Whether this process is pytest's command, run with these `args` (the session's
    invocation arguments): its main module is pytest's entry point, and its command
    line holds the args, not another session's (pytester in process)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    entry = getattr(main, "_console_main", None) or getattr(main, "console_main", None)
    by_module = getattr(spec, "name", None) in ("pytest.__main__", "py.test.__main__")
    by_script = getattr(entry, "__module__", None) == "_pytest.config"
    return (by_module or by_script) and list(sys.argv[1:]) == list(args)


def end_at_exit(status: Callable[[], int]) -> None:
    """Once Python starts to exit (its threads joined), end this process with
    `status()` right after the atexit handlers, which run first. Registered last, so
    it runs first of them and runs the others itself. Where an exception reached the
    top (the exit status is then Python's, not the session's), or where standard
    output is a closed pipe (pytest then exits 1), Python ends as usual."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        return
    atexit.register(_end, status, _uncaught())


def _end(status: Callable[[], int], seen: Optional[Any]) -> None:
    atexit.unregister(_end)
    if _uncaught() is not seen:  # pytest keeps a failed test's for pdb: not this one
        return
    code = status()
    atexit._run_exitfuncs()
    _flush_open_files()
    os._exit(code)


def _uncaught() -> Optional[Any]:
    """The last exception Python (an uncaught one) or pytest (a failed test's) kept
    for a post-mortem debugger."""
    return getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)


def _flush_open_files() -> None:
    """Files still open when the interpreter would have closed them at teardown keep
    what was written to them: each open file object's buffer, flushed (the standard
    streams last). The walk says nothing: an isinstance check on a deprecated object
    (torch.distributed.reduce_op) warns, after the session's last line."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        files = [x for x in gc.get_objects() if isinstance(x, io.IOBase)]
    for obj in files:
        if obj not in (sys.stdout, sys.stderr):
            _flush(obj)
    for stream in (sys.stdout, sys.stderr):
        _flush(stream)


def _flush(stream: Any) -> None:
    try:
        if not stream.closed:
            stream.flush()
    except (OSError, ValueError, AttributeError):
        pass
