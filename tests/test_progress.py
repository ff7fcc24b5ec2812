"""What a running check shows on a terminal: a live `[cold phase N s]` that is erased
again. (A line per phase under -v and nothing live in a log: test_user_programs.py's
session asserts it; neither in a plain log: test_checks_hit.py's.)"""
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


def _session_on_a_terminal(path: Path) -> str:
    (path / "test_body.py").write_text(BODY)
    (path / "pytest.ini").write_text("[pytest]\n")
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--compile-cache-check"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "CI")}
    env["TERM"] = "xterm"
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


def test_a_terminal_shows_the_running_phase_live(tmp_path) -> None:
    """(A plain log, neither verbose nor a terminal, shows neither: test_checks_hit.py's
    session asserts it.)"""
    live = _session_on_a_terminal(tmp_path)
    assert "[cold phase " in live and "[warm phase " in live, live[-3000:]
    assert "    cold phase: " not in live
