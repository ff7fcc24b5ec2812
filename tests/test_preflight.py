"""Unusable output locations are usage errors before anything compiles, and a lock
directory the user names is never chmod-ed. Real pytest sessions; none compiles."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

CHECK = '''
import pytest


@pytest.mark.compile_cache
def test_model(compile_cache):
    raise AssertionError("a usage error must stop the session before any check runs")
'''


def session(path: Path, *args: str) -> subprocess.CompletedProcess:
    (path / "test_model.py").write_text(CHECK)
    (path / "pytest.ini").write_text("[pytest]\n")
    (path / "afile").write_text("not a directory\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           "--compile-cache-check", f"--compile-cache-root={path / 'roots'}",
                           *args], cwd=path, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("option, says", [
    ("--compile-cache-report=afile/report.json", "afile is not a directory; choose a writable file path"),
    ("--compile-cache-report=/proc/compilecache-report.json", "cannot create files in /proc"),
    ("--compile-cache-report=.", "is a directory"),
    ("--compile-cache-store=afile/store", "afile is not a directory; choose a writable directory, or 'none'"),
])
def test_an_unusable_output_is_a_usage_error_before_any_compile(tmp_path, option, says) -> None:
    proc = session(tmp_path, option)
    err = proc.stdout + proc.stderr
    assert proc.returncode == 4, err[-2000:]
    name, _, value = option.partition("=")  # said as an absolute path, fixed at start
    shown = f"{name}={os.path.normpath(os.path.join(tmp_path, value))}" \
        if name == "--compile-cache-report" else option
    assert f"{shown}: " in err and says in err, err[-2000:]
    assert not (tmp_path / "roots").exists()  # no check started


def test_a_root_that_is_a_file_is_a_usage_error(tmp_path) -> None:
    proc = session(tmp_path, f"--compile-cache-root={tmp_path / 'afile'}")
    err = proc.stdout + proc.stderr
    assert proc.returncode == 4, err[-2000:]
    assert f"--compile-cache-root={tmp_path / 'afile'}: {tmp_path / 'afile'} is not a directory" in err


def test_a_named_lock_dir_keeps_its_mode_and_gets_a_private_subdirectory(tmp_path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    target = tmp_path / "target"
    target.mkdir(mode=0o755)
    os.chmod(target, 0o755)
    (tmp_path / "link").symlink_to(target, target_is_directory=True)
    for d, mode in ((shared, 0o1777), (tmp_path / "link", 0o755)):
        proc = session(tmp_path, f"--compile-cache-lock-dir={d}", "--collect-only")
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]
        assert stat.S_IMODE(os.stat(d).st_mode) == mode
        sub = d / f"pytest-compilecache-{os.getuid()}"
        assert sub.is_dir() and stat.S_IMODE(os.stat(sub).st_mode) == 0o700


def _without_redis_client(path: Path) -> dict:
    """An environment whose Python finds no `redis` package (a README install without
    the dev extra): sys.modules["redis"] = None makes find_spec say so."""
    site = path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['redis'] = None\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    return {**env, "PYTHONPATH": os.pathsep.join([str(site), *sys.path])}


def test_without_the_redis_client_the_remote_path_names_an_install_that_works(tmp_path) -> None:
    (tmp_path / "test_model.py").write_text(CHECK)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           "--compile-cache-check", "--compile-cache-via=remote"], cwd=tmp_path,
                          env=_without_redis_client(tmp_path), capture_output=True, text=True,
                          timeout=120)
    err = proc.stdout + proc.stderr
    assert proc.returncode == 4, err[-2000:]
    # the package is not on the index: the hint names what pip can install
    assert "pip install redis (from a checkout of pytest-compilecache: pip install -e " \
           "'.[remote]')" in err, err[-2000:]


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="no redis-server")
def test_the_remote_tests_skip_without_the_redis_client(tmp_path) -> None:
    tests = Path(__file__).parent
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", "-q",
                           str(tests / "test_remote.py")], cwd=tests.parent,
                          env=_without_redis_client(tmp_path), capture_output=True, text=True,
                          timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and " skipped" in out and " passed" not in out, out[-2000:]
    assert "no redis client for torch's remote caches: pip install -e '.[dev]'" in out


def test_a_named_redis_server_that_refuses_is_a_usage_error_before_any_compile(
        tmp_path) -> None:
    """--compile-cache-redis at a port nobody listens on: each check compiled and then
    errored with a 12-line traceback (issue 38); the docs promise an up-front usage
    error. Needs no redis-server: the port refuses."""
    import socket

    with socket.socket() as s:  # a port that was free a moment ago refuses connections
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = session(tmp_path, "--compile-cache-via=remote",
                   f"--compile-cache-redis=127.0.0.1:{port}")
    err = proc.stdout + proc.stderr
    assert proc.returncode == 4, err[-2000:]
    assert f"--compile-cache-redis=127.0.0.1:{port}: no Redis server answers PING there " \
           f"(Connection refused); start it" in err, err[-2000:]
    assert "Traceback" not in err
    assert not (tmp_path / "roots").exists()  # no check started


NOBODY = 65534


def _planted(tmp_path: Path, how: str) -> Path:
    """A directory another user could fill: theirs and open to all, or this user's
    but open to all, or a symlink to a private one (its target can change)."""
    planted = tmp_path / "planted"
    planted.mkdir()
    os.chmod(planted, 0o777)
    if how == "theirs":
        if os.getuid() != 0:
            pytest.skip("chown to another user needs root")
        os.chown(planted, NOBODY, NOBODY)
    if how == "symlink":
        os.chmod(planted, 0o700)
        (tmp_path / "link").symlink_to(planted)
        return tmp_path / "link"
    return planted


@pytest.mark.parametrize("var, args", [
    ("PYTEST_COMPILECACHE_PCH_DIR", ()),
    ("PYTEST_COMPILECACHE_PCH_DIR", ("-n", "2")),
    ("PYTEST_COMPILECACHE_SHARED_DIR", ("--compile-cache-share-variants",)),
    ("PYTEST_COMPILECACHE_SHARED_DIR", ("--compile-cache-share-variants", "-n", "2")),
    ("PYTEST_COMPILECACHE_LOCK_DIR", ()),
])
@pytest.mark.parametrize("how, says", [
    ("theirs", "is owned by another user (uid 65534, mode 777)"),
    ("open", "is open to other users (mode 777)"),
    ("symlink", "is a symlink (to "),
])
def test_a_directory_from_the_environment_gets_the_checks_a_root_gets(
        tmp_path, monkeypatch, var, args, how, says) -> None:
    """Issue 53 point 3: a header dir another user owns (mode 0777) was adopted
    without a word, and its `.gch` names are content-addressed: a planted one would be
    compiled into every kernel. Refused up front, naming the variable and the fix."""
    planted = _planted(tmp_path, how)
    monkeypatch.setenv(var, str(planted))
    proc = session(tmp_path, *args)
    err = proc.stdout + proc.stderr
    assert proc.returncode == 4, err[-2000:]
    assert f"{var} names {planted}, which {says}" in err, err[-2000:]
    assert "an environment fault, not the plugin's or the model's; " \
        f"unset {var} (the session then makes its own)" in err
    assert "Traceback" not in err
    assert os.listdir(planted) == [] and not (tmp_path / "roots").exists()
