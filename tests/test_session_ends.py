"""How a session ends when something outside the checks goes wrong: a report that
cannot be written, a store path that is a file, an interrupt in a warm phase, a phase
that hangs. Real sessions; the checks' bodies do not compile (their phases still start
real processes that import torch: those tests are in the slow lane)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PLAIN = '''
import shutil


def test_takes_the_reports_dir(tmp_path):
    # the report's directory becomes a file after the up-front checks
    d = __import__("os").environ["REPORT_DIR"]
    shutil.rmtree(d)
    open(d, "w").close()
'''


def _session(path: Path, files: dict, *args: str, env: dict = None,
             timeout: float = 120) -> subprocess.CompletedProcess:
    (path / "pytest.ini").write_text("[pytest]\n")
    for name, text in files.items():
        (path / name).write_text(text)
    base = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           "--compile-cache-check", *args],
                          cwd=path, env={**base, **(env or {})}, capture_output=True,
                          text=True, timeout=timeout)


def test_a_report_that_cannot_be_written_is_a_nonzero_exit_naming_it(tmp_path: Path) -> None:
    """It left exit 0 (issue 38): a CI job keyed on the exit status went green without
    its report."""
    d = tmp_path / "out"
    d.mkdir()
    # no check runs: the preloaded launcher's two interpreters would import torch for nothing
    proc = _session(tmp_path, {"test_plain.py": PLAIN}, "--compile-cache-store=none",
                    f"--compile-cache-report={d}/r.json", "--compile-cache-launcher=fresh",
                    env={"REPORT_DIR": str(d)})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-2000:]
    assert f"report NOT written: could not write the JSON report to {d}/r.json: {d} is a " \
           f"file, not a directory (errno 17); an environment problem, not the model: move " \
           f"or delete {d}, or choose another location" in out, out[-2000:]
    assert "the exit status is 1 although the checks passed" in out
    assert "Traceback" not in out



def test_a_store_replaced_by_a_file_is_named(tmp_path: Path) -> None:
    """It said `File exists (errno 17)`, naming no file to move (issue 38). A real
    store write on a planted file, read as a check reads it (its compile is not needed
    to write a manifest)."""
    from pytest_compilecache.controller.diskspace import write_problem
    from pytest_compilecache.history.store import ManifestStore

    store = tmp_path / "store"
    store.write_text("")
    env = {"torch": "2.13.0", "triton": None, "cuda": None, "python": "3.11.7",
           "device": "cpu", "device_name": None}
    with pytest.raises(OSError) as e:
        ManifestStore(store).merge({"sha": "abc", "dirty": False}, env,
                                   {"t.py::test_x": {"graphs": {"0/0": {}}}})
    said = write_problem("the key manifest", store, e.value)
    assert said.startswith(f"could not write the key manifest to {store}: {store} is a file, "
                           f"not a directory (errno "), said
    assert said.endswith(f"move or delete {store}, or choose another location"), said


SLOW_WARM = '''
import os
import time

import pytest


@pytest.mark.compile_cache
def test_slow_warm(compile_cache):
    if compile_cache.phase == "warm":
        open(os.environ["WARM_STARTED"], "w").close()
        time.sleep(300)
'''


@pytest.mark.slow  # two phases' processes import torch (no compile): ~30 s
def test_an_interrupt_in_the_warm_phase_says_the_cold_one_ran(tmp_path: Path) -> None:
    """SIGTERM (a CI cancel) while the warm phase runs: the check said `not run`, as if
    its finished cold phase had not run (issue 38)."""
    import json
    import signal
    import time

    flag, report = tmp_path / "warm-started", tmp_path / "r.json"
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_slow.py").write_text(SLOW_WARM)
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                             "--compile-cache-check", "--compile-cache-store=none",
                             f"--compile-cache-report={report}"], cwd=tmp_path,
                            env={**env, "WARM_STARTED": str(flag)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        end = time.time() + 180
        while not flag.exists():
            assert time.time() < end and proc.poll() is None, "no warm phase"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    [c] = json.loads(report.read_text())["checks"]
    assert c["verdict"] == "not run", out[-3000:]
    assert c["error"].startswith("the session was interrupted (SIGTERM) during this check's "
                                 "warm phase, after its cold ("), c["error"]
    assert c["error"].endswith("s) phase had finished; no verdict: run the check again")


HANGS = '''
import logging
import time

import pytest


@pytest.mark.compile_cache
def test_hangs():
    logging.getLogger("loader").warning("loading the weights")  # held by pytest's capture
    time.sleep(600)
'''


@pytest.mark.slow  # waits out a 12 s timeout after torch's import (no compile)
def test_a_hung_phase_shows_where_it_hung(tmp_path: Path) -> None:
    """A phase killed at its timeout showed none of its output (issue 38): what it
    logged was held by pytest's capture of the test, which never ended. Its stacks are
    written to its log shortly before the timeout, and quoted."""
    import json

    report = tmp_path / "r.json"
    proc = _session(tmp_path, {"test_hangs.py": HANGS}, "--compile-cache-store=none",
                    "--compile-cache-timeout=12", f"--compile-cache-report={report}",
                    f"--compile-cache-root={tmp_path / 'roots'}")  # its kept root: here
    [c] = json.loads(report.read_text())["checks"]
    assert c["verdict"] == "error", (proc.stdout + proc.stderr)[-3000:]
    assert c["error"].startswith("cold phase timed out after 12 s"), c["error"]
    said = c["error"].split("--- last lines of its output ---\n", 1)[-1]
    assert "Timeout (0:00:" in said and 'test_hangs.py", line 11 in test_hangs' in said, said
    assert "more line(s) of its stacks in the log" in said and said.count("\n") < 40


IGNORES_SIGTERM = '''
import os
import signal
import subprocess
import time

import pytest


@pytest.mark.compile_cache
def test_shuts_down_gracefully(compile_cache):
    if compile_cache.phase == "warm":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a graceful-shutdown handler
        subprocess.Popen(["sleep", "600"], start_new_session=True)
        open(os.environ["WARM_STARTED"], "w").close()
        time.sleep(300)
'''


@pytest.mark.slow  # two phases' processes import torch (no compile): ~30 s
@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM"])
def test_nothing_outlives_a_controller_killed_in_the_warm_phase(tmp_path: Path,
                                                                 sig: str) -> None:
    """The warm phase's body ignores SIGTERM and starts a daemon in a session of its own;
    the controller is SIGKILLed: the phase (re-parented to init) and the daemon ran on,
    forever (issue 53). A few seconds later no process of the session is left. After a
    SIGTERM (a CI cancel), which the controller passes on to its children, the daemon
    ran on too."""
    import signal
    import time
    import uuid

    from test_faults import marked

    flag, mark = tmp_path / "warm-started", f"COMPILECACHE_OUTLIVE_TEST={uuid.uuid4().hex}"
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_graceful.py").write_text(IGNORES_SIGTERM)
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env.update([mark.split("=")], WARM_STARTED=str(flag))
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                             "--compile-cache-check", "--compile-cache-store=none",
                             f"--compile-cache-root={tmp_path / 'roots'}"], cwd=tmp_path,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.time() + 180
        while not flag.exists():
            assert time.time() < end and proc.poll() is None, "no warm phase"
            time.sleep(0.2)
    finally:
        proc.send_signal(getattr(signal, sig))
        proc.wait(timeout=60)
    end = time.time() + 10
    while marked(mark) and time.time() < end:
        time.sleep(0.2)
    assert not marked(mark)
