"""How the controller process ends after its report (controller/exit.py): without the
teardown of the modules its tests imported (torch's took 1.5 s on an H200), but with
its atexit handlers, its open files flushed and its session's exit status; and
pytest.main() in a script still returns to the script. Real sessions, no check
compiles (nothing imports torch)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Sequence

CONFTEST = '''
import atexit
import sys

LOG = open("unclosed.log", "w")  # never closed: the interpreter's teardown flushes it
LOG.write("written before the exit\\n")


class TornDown:
    def __del__(self):
        sys.stderr.write("module teardown ran\\n")


KEEP = TornDown()
atexit.register(lambda: open("atexit.txt", "w").write("ran"))
'''

TESTS = '''
def test_fails():
    assert 0, "a plain test that fails: the session exits 1"
'''

SCRIPT = '''
import sys
import pytest

rc = pytest.main(["-p", "no:cacheprovider", "--compile-cache-check", "-q"])
print("main returned", int(rc))
sys.exit(5)
'''


def _run(path: Path, argv: Sequence[str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    return subprocess.run([sys.executable, *argv], cwd=path, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_controller_ends_after_its_atexit_handlers_keeping_files_and_status(
        tmp_path: Path) -> None:
    for name, text in {"pytest.ini": "[pytest]\n", "conftest.py": CONFTEST,
                       "test_plain.py": TESTS, "script.py": SCRIPT}.items():
        (tmp_path / name).write_text(text)
    done = _run(tmp_path, ["-m", "pytest", "-p", "no:cacheprovider",
                           "--compile-cache-check", "test_plain.py"])
    assert done.returncode == 1, done.stdout + done.stderr
    assert "module teardown ran" not in done.stderr  # the teardown skipped
    assert (tmp_path / "atexit.txt").read_text() == "ran"
    assert (tmp_path / "unclosed.log").read_text() == "written before the exit\n"
    # pytest.main() in a script: the script goes on, with its own exit status
    (tmp_path / "unclosed.log").unlink()
    scripted = _run(tmp_path, ["script.py"])
    assert scripted.returncode == 5, scripted.stdout + scripted.stderr
    assert "main returned 1" in scripted.stdout
    assert "module teardown ran" in scripted.stderr
    assert (tmp_path / "unclosed.log").read_text() == "written before the exit\n"


def test_the_flush_of_open_files_says_nothing_of_deprecated_objects() -> None:
    # the newcomer's walk of issue 52: every session ended with `<frozen abc>:119:
    # FutureWarning: torch.distributed.reduce_op is deprecated`, after its last line
    import warnings

    import torch.distributed  # noqa: F401  (its reduce_op warns on isinstance)

    from pytest_compilecache.controller import exit as controller_exit

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        controller_exit._flush_open_files()
    assert [str(w.message) for w in said] == []
