"""What a running check shows: a line per phase under -v; on a terminal a live
`[cold phase N s]` that is erased again; nothing extra in a plain log (CI)."""
from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BODY = '''
import pytest
import torch


@pytest.mark.compile_cache
def test_body():
    torch.compile(lambda x: torch.sin(x) + 1)(torch.ones(8))
'''


def _session(path: Path, *args: str, tty: bool = False) -> str:
    (path / "test_body.py").write_text(BODY)
    (path / "pytest.ini").write_text("[pytest]\n")
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--compile-cache-check",
            *args]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "CI")}
    env["TERM"] = "xterm"
    if not tty:
        proc = subprocess.run(argv, cwd=path, env=env, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, proc.stdout[-3000:]
        return proc.stdout
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(argv, cwd=path, env=env, stdin=terminal, stdout=terminal,
                            stderr=terminal)
    os.close(terminal)
    out = b""
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # the pseudo-terminal closes when the session ends
            break
        if not chunk:
            break
        out += chunk
    assert proc.wait(timeout=600) == 0, out[-3000:]
    os.close(controller)
    return out.decode(errors="replace")


def test_verbose_shows_a_line_per_phase_and_nothing_live_in_a_log(tmp_path) -> None:
    out = _session(tmp_path, "-v")
    assert "    cold phase: " in out and "    warm phase: " in out, out[-3000:]
    assert "test_body.py::test_body PASSED" in out  # pytest repeats the name before it
    assert "[cold phase" not in out and "\b" not in out  # not a terminal: nothing live


def test_a_terminal_shows_the_running_phase_live(tmp_path) -> None:
    """(A plain log, neither verbose nor a terminal, shows neither: test_checks_hit.py's
    session asserts it.)"""
    live = _session(tmp_path, tty=True)
    assert "[cold phase " in live and "[warm phase " in live, live[-3000:]
    assert "    cold phase: " not in live
