"""Plugin behaviour that needs no compile: opt-out, no-flag, usage errors, cheap
import, and children that crash or hang (the session goes on)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Tuple

import pytest

CASE_TEST = """
import pytest
from pytest_compilecache import ModelCase

@pytest.fixture
def model_case():
    return ModelCase(model=None, example_inputs=())

@pytest.mark.compile_cache(mode="max-autotune")
def test_model(model_case):
    open("body_ran", "w").write("yes")
"""


def test_without_the_flag_the_marker_changes_nothing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(CASE_TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert (pytester.path / "body_ran").read_text() == "yes"
    result.stdout.no_fnmatch_line("*compile-cache summary*")


def test_opt_out_with_p_no_compilecache(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(CASE_TEST)
    result = pytester.runpytest_subprocess("-p", "no:compilecache", "--compile-cache-check")
    result.stderr.fnmatch_lines(["*unrecognized arguments: --compile-cache-check*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_marker_is_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.compile_cache(**compile_kwargs):*"])


@pytest.mark.parametrize("option, message", [
    ("--compile-cache-device=tpu", "*'tpu' is not a device; use one of auto, cpu, cuda*"),
    ("--compile-cache-timeout=0", "*timeout must be > 0 seconds*"),
    ("--compile-cache-warm-tolerance=a,b", "*use 'bitwise' or ATOL*"),
    ("--compile-cache-via=local,usb", "*'local,usb': the warm-start paths are local, mega*"),
])
def test_bad_option_values_name_the_fix(pytester: pytest.Pytester, option: str,
                                        message: str) -> None:
    result = pytester.runpytest_subprocess(option)
    result.stderr.fnmatch_lines([message])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_via_goes_with_neither_deploy_nor_recording(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--compile-cache-check", "--compile-cache-via=mega",
                                           "--compile-cache-manifest-only")
    result.stderr.fnmatch_lines(["*--compile-cache-via checks warm starts of this commit*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result = pytester.runpytest_subprocess("--compile-cache-check", "--compile-cache-via=aoti",
                                           "--compile-cache-repeat")
    result.stderr.fnmatch_lines(["*compare the keys of the local restart's cold run: add "
                                 "local to --compile-cache-via*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_every_path_is_one_class_with_both_sides() -> None:
    """One registry: each built-in path judges its phases and is offered by
    --compile-cache-via's help exactly when it is selectable."""
    from pytest_compilecache import paths
    from pytest_compilecache.paths.artifact import ArtifactPath
    from pytest_compilecache.paths.base import WarmStartPath

    reg = paths.builtin()
    offered = [cls for cls in reg.values() if cls.selectable]
    # the help's table, written out so that start-up imports no path module, is theirs
    assert paths.LOCAL_SUMMARIES == tuple(
        cls.summary for cls in offered if not issubclass(cls, ArtifactPath))
    assert paths.CARRIED_SUMMARIES == tuple(
        cls.summary for cls in offered if issubclass(cls, ArtifactPath))
    assert paths.WarmStartPath is WarmStartPath
    # the paths' own options, written out for --help, are theirs (the remote path's redis)
    assert paths.builtin_options() == tuple(o for cls in reg.values() for o in cls.options)
    assert [o.name for o in paths.builtin_options()] == ["redis"]
    assert paths.selectable(reg) == ["local", "mega", "precompile", "aot", "aoti", "remote"]
    assert {"deploy", "record"} <= set(reg)
    for name, cls in reg.items():
        assert cls.name == name and cls.phases, name
        assert cls.judge is not WarmStartPath.judge, name
        if cls.selectable:
            assert cls.summary.split(" ")[0] == name and f" {cls.summary}" in paths.via_help()
        else:
            assert not cls.summary and f" {name} (" not in paths.via_help(), name


def test_bad_ini_value_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ncompile_cache_device = tpu\n")
    result = pytester.runpytest_subprocess("--compile-cache-check")
    result.stderr.fnmatch_lines(["*compile_cache_device*'tpu' is not a device*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_plugin_import_does_not_import_torch() -> None:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c",
                           "import pytest_compilecache.plugin, pytest_compilecache"],
                          capture_output=True, text=True, check=True)
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines()
                if line.startswith("import time:")}
    assert "pytest_compilecache.plugin" in imported
    assert not {m for m in imported if m == "torch" or m.startswith("torch.")}


CRASH_HANG = """
import os, subprocess, sys, time
import pytest

@pytest.mark.compile_cache
def test_crash():
    sys.stderr.write("about to abort\\n"); sys.stderr.flush()
    os.abort()

@pytest.mark.compile_cache
def test_hang():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    open(os.environ["GRANDCHILD_PID_FILE"], "w").write(str(child.pid))
    time.sleep(600)

@pytest.mark.compile_cache
def test_fails_in_body():
    assert 1 == 2, "the workload itself is broken"

@pytest.fixture
def broken_case():
    raise RuntimeError("the model fixture exploded")

@pytest.mark.compile_cache
def test_fixture_fails(broken_case):
    ...

def test_plain():
    pass
"""

CONTROLLER_PROBE = """
import json, os, sys

def pytest_sessionfinish(session):
    if session.config.getoption("compile_cache_check") and \\
            not hasattr(session.config, "workerinput"):
        with open(os.environ["CONTROLLER_PROBE"], "w") as f:
            json.dump({"torch_imported": "torch" in sys.modules}, f)
"""


XDIST = {"no-xdist": [], "xdist": ["-n", "2"]}


@pytest.fixture(scope="module")
def crash_hang(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Tuple[Path, pytest.RunResult]]:
    """The session without xdist and the one under it, started together: each waits out
    its hang's 25 s timeout, and the two waits overlap (CI time, issue 37)."""
    started = {}
    for mode, xdist in XDIST.items():
        path = tmp_path_factory.mktemp(f"crash_hang_{mode}")
        (path / "test_bad.py").write_text(CRASH_HANG)
        (path / "conftest.py").write_text(CONTROLLER_PROBE)
        env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
        env.update(GRANDCHILD_PID_FILE=str(path / "grandchild.pid"),
                   CONTROLLER_PROBE=str(path / "controller.json"),
                   HOME=str(path))  # as pytester has it: no user's config
        out, err = (open(path / name, "w+") for name in ("stdout", "stderr"))
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", f"--basetemp={path / 'basetemp'}",
             "--compile-cache-check", "--compile-cache-timeout=25", "-p", "no:cacheprovider",
             f"--compile-cache-report={path / 'report.json'}", *xdist],
            cwd=path, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        started[mode] = (path, proc, out, err, time.monotonic())
    done = {}
    try:
        for mode, (path, proc, out, err, t0) in started.items():
            ret = proc.wait(timeout=300)
            lines = [(f.seek(0), f.read().splitlines())[1] for f in (out, err)]
            done[mode] = (path, pytest.RunResult(ret, *lines, time.monotonic() - t0))
    finally:
        for path, proc, out, err, t0 in started.values():
            if proc.poll() is None:
                proc.kill()
            out.close()
            err.close()
    return done


@pytest.mark.slow  # a real hang, waited out to its timeout: about 40 s (both sessions at once)
@pytest.mark.parametrize("mode", XDIST)
def test_crash_and_hang_are_errors_and_the_session_goes_on(
        crash_hang: Dict[str, Tuple[Path, pytest.RunResult]], mode: str) -> None:
    path, result = crash_hang[mode]
    result.assert_outcomes(passed=1, failed=4)
    checks = {c["nodeid"].split("::")[-1]: c
              for c in json.loads((path / "report.json").read_text())["checks"]}
    assert {n: c["verdict"] for n, c in checks.items()} == {
        "test_crash": "error", "test_hang": "error", "test_fails_in_body": "error",
        "test_fixture_fails": "error"}
    assert "crashed or exited early (exit code -6)" in checks["test_crash"]["error"]
    assert "about to abort" in checks["test_crash"]["error"]
    assert "timed out after 25 s" in checks["test_hang"]["error"]
    assert "the workload itself is broken" in checks["test_fails_in_body"]["error"]
    # a phase whose check never ran exits normally: its log keeps pytest's account
    assert "did not run" in checks["test_fixture_fails"]["error"]
    assert "the model fixture exploded" in checks["test_fixture_fails"]["error"]
    # the hung child's own subprocess died with its process group
    assert not _alive(int((path / "grandchild.pid").read_text()))
    # the controller itself never imported torch
    assert json.loads((path / "controller.json").read_text()) == {"torch_imported": False}


def _alive(pid: int, grace_s: float = 10.0) -> bool:
    """A killed process may linger as a zombie until reaped; that counts as dead."""
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return False
        if state in ("Z", "X"):
            return False
        time.sleep(0.2)
    return True



SKIP_JOIN = """
import atexit, sys
import torch._inductor.async_compile as ac

class Pool:
    def shutdown(self):
        print("pool joined", flush=True)

ac._pool_set.add(Pool())
atexit.register(lambda: print("other handler ran", flush=True))
if sys.argv[1] == "skip":
    from pytest_compilecache.child.exit import skip_worker_pool_join
    skip_worker_pool_join()
"""


@pytest.mark.parametrize("skip", [True, False])
def test_a_phase_skips_only_the_join_of_torchs_compile_worker_pool(skip: bool) -> None:
    # measured on an H100: the join waited 10-11 s after warm inference phases, 0.2-0.3 s without
    out = subprocess.run([sys.executable, "-c", SKIP_JOIN, "skip" if skip else "keep"],
                         capture_output=True, text=True, timeout=120).stdout
    assert "other handler ran" in out
    assert ("pool joined" in out) is not skip


def test_every_option_has_an_ini_twin(pytester: pytest.Pytester) -> None:
    """check, the flags, report and shard are set from the ini file too; no
    'Unknown config option' warning."""
    pytester.makeini("[pytest]\ncompile_cache_check = true\ncompile_cache_keep = true\n"
                     "compile_cache_report = r.json\ncompile_cache_shard = 1/2\n")
    pytester.makepyfile("def test_plain():\n    pass\n")
    # -W error: neither an unknown ini key nor a pipe of the plugin's left open (a
    # ResourceWarning) may fail a user's session that runs with warnings as errors
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "error",
                                           "-W", "ignore:Failed to initialize NumPy")
    result.stdout.no_fnmatch_line("*Unknown config option*")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-2000:]
    data = json.loads((pytester.path / "r.json").read_text())  # the check ran (from the ini)
    assert data["no_checks"] and data["checks"] == []


def test_help_shows_defaults_and_hides_the_internal_option(pytester: pytest.Pytester) -> None:
    out = pytester.runpytest_subprocess("--help").stdout.str()
    assert "--compile-cache-select" not in out
    flat = " ".join(out.split())  # the help wraps its lines
    assert "(default: 1800 for a phase that compiles; 4x the first phase's seconds" in flat
    assert "(default: 7200)" in flat and "compile_cache_check (bool)" in out


def test_every_subpackage_is_in_the_distribution() -> None:
    """pyproject lists the packages by name: a new folder missing there installs from a
    checkout (-e) but not from a wheel."""
    import tomllib

    root = Path(__file__).parent.parent
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    found = {".".join(p.parent.relative_to(root).parts)
             for p in (root / "pytest_compilecache").rglob("__init__.py")}
    assert found == listed
