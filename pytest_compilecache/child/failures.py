"""Where a re-run of the test's own code failed, in one line: the plugin's eager,
probe and float64 re-runs run the test body again, and a body that asserts on what only
its compiled run or its own seed gives fails there. The line names the test's file and
line, never the plugin's frames. No pytest import."""
from __future__ import annotations

import os


def probe_failed(e: BaseException, test_file: str) -> str:
    """One line: the probe run (the eager reference with other draws inside the
    compiled calls) failed, where in the test's own code and how; a test that asserts
    on values its own seed gives fails there, so no tensor is treated as random."""
    where = where_in_test(e, test_file)
    what = ("the test's own assertion failed" if isinstance(e, AssertionError) and where
            else "the test body failed")
    return (f"could not tell which tensors depend on random draws: {what}{where} in the "
            f"plugin's probe run (the eager reference again, other random draws inside its "
            f"compiled calls): {first_line(e)}; so no tensor was treated as random")


def where_in_test(e: BaseException, test_file: str) -> str:
    """" at test_x.py:12 `the line`" for the innermost frame of `e` in the test's own
    file (a path, or a node id's file part relative to the root), else ""."""
    import traceback as tb

    want = os.path.abspath(test_file)
    frames = [f for f in tb.extract_tb(e.__traceback__)
              if os.path.abspath(f.filename) == want
              or os.path.abspath(f.filename).endswith(os.sep + test_file)]
    if not frames:
        return ""
    f = frames[-1]
    return f" at {os.path.basename(f.filename)}:{f.lineno}" + (f" `{f.line}`" if f.line else "")


def first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:300]
