"""What a killed session leaves (SIGKILL of the controller, alone and under -n 2, with
the remote path's private redis-server) is found and removed by `pytest-compilecache
clean`, which never offers a running session's directories; the earlier report at the
session's report path is moved aside when it starts, so a killed session leaves none
that reads as its own. Real sessions and real signals; the check sleeps, nothing
compiles. Each session has a temp dir of its own (TMPDIR): `clean` here never sees
another test's or another session's directories."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import List

import pytest

from pytest_compilecache.controller.session import PCH_DIR_ENV
from test_faults import marked

# the body ignores SIGTERM (a framework's graceful-shutdown handler does) and starts a
# daemon in a session of its own: both outlived a killed controller (issue 53)
SLEEPS = '''
import os
import signal
import subprocess
import time

import pytest


@pytest.mark.compile_cache
def test_sleep():
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    subprocess.Popen(["sleep", "600"], start_new_session=True)
    open(os.environ["BODY_STARTED"], "w").close()
    time.sleep(300)
'''


def _clean(path: Path, *args: str) -> str:
    env = {**os.environ, "TMPDIR": str(path / "tmp")}
    proc = subprocess.run([sys.executable, "-m", "pytest_compilecache", "clean", "--root",
                           str(path / "roots"), "--min-age", "0", *args], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _ours(path: Path) -> List[str]:
    """The session's directories: its temp dir's (pytest's own basetemp aside) and roots."""
    return sorted([p.name for p in (path / "tmp").iterdir()
                   if not p.name.startswith("pytest-of-")]
                  + [p.name for p in (path / "roots").iterdir()])


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["alone", "xdist"])
def test_clean_removes_what_a_killed_session_left_and_never_a_live_one(
        tmp_path: Path, xdist: List[str]) -> None:
    remote = ["--compile-cache-via=remote"] if shutil.which("redis-server") else []
    (tmp_path / "tmp").mkdir()
    (tmp_path / "roots").mkdir()
    (tmp_path / "test_sleep.py").write_text(SLEEPS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    report = tmp_path / "report.json"
    report.write_text('{"an": "earlier session\'s report"}')
    key, value = "COMPILECACHE_LEFTOVERS_TEST", uuid.uuid4().hex
    # the session's own header dir, among what `clean` must remove
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", PCH_DIR_ENV)}
    started = tmp_path / "body-started"
    env.update({"TMPDIR": str(tmp_path / "tmp"), key: value, "BODY_STARTED": str(started)})
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--compile-cache-check",
         f"--compile-cache-report={report}", f"--compile-cache-root={tmp_path / 'roots'}",
         *xdist, *remote], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        end = time.time() + 120
        while not started.exists():
            assert time.time() < end and proc.poll() is None, "the check never started"
            time.sleep(0.2)
        live = _ours(tmp_path)
        # another session's `clean` while this one runs: nothing of it is offered
        out = _clean(tmp_path, "--dry-run")
        assert "would remove" not in out, out
        assert "in use by running session(s)" in out, out
        assert not report.exists()  # moved aside as the session started
        assert (tmp_path / "report.json.previous").read_text().startswith('{"an"')
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    end = time.time() + 10  # nothing of the session outlives it: a few seconds
    while marked(f"{key}={value}") and time.time() < end:
        time.sleep(0.2)
    assert not marked(f"{key}={value}")
    left = _ours(tmp_path)
    assert left, live  # the killed session could not clean up
    assert not report.exists()  # no report that reads as the killed session's
    out = _clean(tmp_path)
    assert _ours(tmp_path) == [], (live, left, out)
    assert "did not finish" in out and "in use" not in out, out
    for name in left:
        assert f"/{name} (" in out, out


def test_a_root_whose_removal_was_cut_short_is_still_found_by_clean(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CI failed at random on the test above (issue 53): after a killed `-n 2` session,
    `clean` left the interrupted check's root. Its worker was still removing it when it
    was cut short (xdist ends a worker 5 s after its controller is gone with an
    interrupt, then os._exit): the removal went in directory order and had taken the
    owner record, and some of the parts, so the rest was no root `clean` knew. Here the
    removal is cut at each of its steps in turn, but for its last (the empty root's
    rmdir, right after its record goes: a cut there leaves an empty directory)."""
    from pytest_compilecache import leftovers
    from pytest_compilecache.isolation import ROOT_PARTS, CacheRoot, cache_roots

    real = {"unlink": os.unlink, "rmdir": os.rmdir}
    for cut in range(1, 12):
        root = CacheRoot.create("test-x", str(tmp_path))
        (root.phases / "cold.log").write_text("its log")
        # the owner record of a process that is gone (its pid, another start time)
        (root.path / leftovers.OWNER_FILE).write_text(f"{os.getpid()} gone\n")
        steps = []

        def step(name: str, *args: object, **kwargs: object) -> None:
            steps.append(name)
            if len(steps) == cut and str(args[0]) != str(root.path):
                raise KeyboardInterrupt
            real[name](*args, **kwargs)

        for name in real:
            monkeypatch.setattr(os, name, lambda *a, _n=name, **k: step(_n, *a, **k))
        try:
            root.remove()
        except KeyboardInterrupt:
            pass
        finally:
            monkeypatch.undo()
        if root.path.exists():
            assert root.path in cache_roots(str(tmp_path)), (cut, sorted(
                p.name for p in root.path.iterdir()))
            leftovers.clean(cache_roots(str(tmp_path)), ROOT_PARTS, 0, False)
        assert not root.path.exists() and list(tmp_path.iterdir()) == [], cut


def test_a_root_an_xdist_worker_made_is_in_use_while_its_controller_runs(
        tmp_path: Path) -> None:
    """`clean --min-age 0` beside a `-n 2` session removed a failing check's kept root
    0.4 s before the controller reported it (issue 53): its owner record named the
    worker, which had exited. A worker's record names its controller too (here: this
    process, as a controller hands itself to the stand-in worker that makes a root and
    exits)."""
    from pytest_compilecache import leftovers
    from pytest_compilecache.isolation import ROOT_PARTS, cache_roots

    code = ("import sys; from pytest_compilecache.isolation import CacheRoot; "
            "print(CacheRoot.create('test-kept', sys.argv[1]).path)")
    undo = leftovers.report_what_workers_make()
    try:
        env = dict(os.environ)
    finally:
        undo()
    made = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env,
                          capture_output=True, text=True, check=True).stdout.strip()
    root = Path(made)
    assert leftovers.owner(root) == (os.getpid(), True)  # the worker is gone, we are not
    left = leftovers.clean(cache_roots(str(tmp_path)), ROOT_PARTS, 0, False)
    assert root.exists(), left
    # once the controller is gone too, it is a leftover (a record of two gone processes)
    (root / leftovers.OWNER_FILE).write_text("999999 1\n999998 2\n")
    leftovers.clean(cache_roots(str(tmp_path)), ROOT_PARTS, 0, False)
    assert not root.exists()


def test_a_lock_dir_the_session_made_and_removed_leaves_no_variable(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A pytester session runs in the tests' process: the next one there makes its own
    lock dir instead of inheriting one that is gone (a usage error naming it)."""
    import tempfile

    from pytest_compilecache.controller.gpus import (LOCK_DIR_ENV, forget_lock_dir,
                                                     session_lock_dir)
    from pytest_compilecache.leftovers import remove_owned

    monkeypatch.delenv(LOCK_DIR_ENV, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made = session_lock_dir(None)
    assert os.environ[LOCK_DIR_ENV] == made
    remove_owned(Path(made))
    forget_lock_dir(made)
    assert LOCK_DIR_ENV not in os.environ
    again = session_lock_dir(None)
    assert again != made and Path(again).is_dir()
    remove_owned(Path(again))
    forget_lock_dir(again)
