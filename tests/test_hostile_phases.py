"""Phases that misbehave, with real processes (issue 30): a daemon in a session of its
own outlives nothing, a phase that prints without end fills neither the disk nor the
controller's memory, and every phase process says which check and phase it serves."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import tracemalloc
import uuid
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import RepoRun, run_repo
from pytest_compilecache.isolation import CHILD_SPEC_ENV
from pytest_compilecache.launch.launcher import LaunchResult, SubprocessLauncher
from pytest_compilecache.launch.phaselog import HEAD_BYTES, TAIL_BYTES


def marked(marker: str) -> List[int]:
    """Live processes (zombies excluded) whose environment holds `marker`."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if marker.encode() not in (d / "environ").read_bytes():
                continue
            if (d / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(d.name))
        except OSError:
            continue
    return found


def end(pids: List[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def test_the_tail_is_read_from_the_end_of_a_huge_log(tmp_path: Path) -> None:
    log = tmp_path / "cold.log"
    with open(log, "wb") as f:
        f.write((b"x" * 1023 + b"\n") * (48 << 10))  # 48 MiB of noise
        f.write(b"I1124 14:20:45.000000 1234 torch/_inductor/codecache.py:99] debug\n" * 500)
        f.write(b"E       ValueError: the cause\n")
    tracemalloc.start()
    try:
        tail = LaunchResult(1, False, 0.0, log).tail()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert tail.endswith("E       ValueError: the cause") and "debug" not in tail
    assert tail.count("\n") == 39  # 40 lines, past torch's debug lines
    assert peak < 16 << 20, peak  # never the whole file


def test_the_log_of_a_phase_that_prints_without_end_is_capped(tmp_path: Path) -> None:
    log = tmp_path / "cold.log"
    script = textwrap.dedent('''
        import sys
        sys.stdout.write("THE FIRST LINE\\n")
        line = "y" * 1023 + "\\n"
        for _ in range(64 << 10):  # 64 MiB
            sys.stdout.write(line)
        sys.stdout.write("THE LAST LINE\\n")
        sys.exit(3)
    ''')
    got = SubprocessLauncher().run(["-c", script], dict(os.environ), str(tmp_path), log, 120)
    assert got.returncode == 3
    size = log.stat().st_size
    assert size <= HEAD_BYTES + TAIL_BYTES + 4096, size
    with open(log, "rb") as f:
        assert f.read(15) == b"THE FIRST LINE\n"
    assert got.tail().endswith("THE LAST LINE")
    assert "MiB of this phase's output left out here" in got.tail(lines=10 << 10)


def test_a_daemon_in_a_session_of_its_own_is_ended_and_named(tmp_path: Path) -> None:
    """And the phase's environment names its check and phase."""
    key, value = "HOSTILE_TEST_MARK", uuid.uuid4().hex
    spec = tmp_path / "cold-spec.json"
    spec.write_text(json.dumps({"nodeid": "tests/t.py::test_x", "phase": "cold"}))
    script = textwrap.dedent('''
        import os, subprocess
        print(os.environ.get("PYTEST_COMPILECACHE_PHASE"), flush=True)
        subprocess.Popen(["sleep", "600"], start_new_session=True)
    ''')
    env = {**os.environ, key: value, CHILD_SPEC_ENV: str(spec)}
    ours = subprocess.Popen(["sleep", "30"])  # the controller's own child is no phase's
    try:
        got = SubprocessLauncher().run(["-c", script], env, str(tmp_path), tmp_path / "cold.log",
                                       60)
        assert not marked(f"{key}={value}")
        assert ours.poll() is None
    finally:
        end(marked(f"{key}={value}"))
        ours.kill()
        ours.wait()
    assert got.returncode == 0
    assert len(got.leftovers) == 1 and re.fullmatch(r"sleep 600 \(pid \d+\)", got.leftovers[0])
    assert (tmp_path / "cold.log").read_text().strip() == "tests/t.py::test_x [cold]"


TESTS = '''
import json
import os
import subprocess
import sys

import pytest
import torch

from models import MLP


def say_who(compile_cache):
    with open("/proc/self/comm") as f:
        comm = f.read().strip()
    out = os.path.join(os.environ["HOSTILE_OUT"], f"{os.getpid()}.json")
    with open(out, "w") as f:
        json.dump({"marker": os.environ.get("PYTEST_COMPILECACHE_PHASE"), "comm": comm}, f)


@pytest.mark.compile_cache
def test_daemon(compile_cache):
    with torch.no_grad():
        torch.compile(MLP().eval())(torch.randn(4, 16))
    subprocess.Popen(["sleep", "600"], start_new_session=True)
    say_who(compile_cache)


@pytest.mark.compile_cache
def test_loud(compile_cache):
    line = "z" * 1023 + "\\n"
    for _ in range(200 << 10):  # 200 MiB
        sys.stdout.write(line)
    sys.stdout.write("THE LAST WORDS\\n")
    sys.stdout.flush()
    os._exit(3)
'''

# the controller's peak memory, once torch is imported (collection) and at the end
CONFTEST = '''
import json
import os
import resource


def _rss(name):
    if os.getppid() != int(os.environ["HOSTILE_PARENT"]):  # a phase, not the controller
        return
    path = os.path.join(os.environ["HOSTILE_OUT"], "controller.json")
    got = json.load(open(path)) if os.path.exists(path) else {}
    got[name] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    json.dump(got, open(path, "w"))


def pytest_collection_finish(session):
    _rss("collected")


def pytest_sessionfinish(session):
    _rss("finished")
'''


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, object]:
    path = tmp_path_factory.mktemp("hostile")
    out = path / "out"
    out.mkdir()
    key, value = "HOSTILE_TEST_MARK", uuid.uuid4().hex
    try:
        run = run_repo(path / "repo", {"test_hostile.py": TESTS, "conftest.py": CONFTEST},
                       f"--compile-cache-root={path / 'roots'}",
                       env={"HOSTILE_OUT": str(out), "HOSTILE_PARENT": str(os.getpid()),
                            key: value})
        left = marked(f"{key}={value}")
    finally:
        end(marked(f"{key}={value}"))
    return {"run": run, "left": left, "out": out, "roots": path / "roots"}


@pytest.mark.slow
def test_a_phases_daemon_does_not_outlive_the_session(hostile: Dict[str, object]) -> None:
    run = hostile["run"]
    assert isinstance(run, RepoRun)
    assert hostile["left"] == [], run.out[-3000:]
    c = run.check("test_daemon")
    assert c["verdict"] == "pass", run.out[-3000:]
    for phase in ("cold", "warm"):  # one daemon per run of the body
        said = [n for n in c["notes"] if n.startswith(f"the {phase} phase left ")]
        assert len(said) == 1 and re.fullmatch(
            rf"the {phase} phase left (\d+) process(es)? running, ended: "
            r"sleep 600 \(pid \d+\)(, sleep 600 \(pid \d+\))*", said[0]), c["notes"]


@pytest.mark.slow
def test_a_phase_that_prints_200_mib_is_capped_and_its_tail_read_from_the_end(
        hostile: Dict[str, object]) -> None:
    run = hostile["run"]
    assert isinstance(run, RepoRun)
    c = run.check("test_loud")
    assert c["verdict"] == "error" and "exit code 3" in c["error"], run.out[-3000:]
    assert c["error"].rstrip().endswith("THE LAST WORDS")
    logs = list(Path(str(hostile["roots"])).glob("compilecache-test-loud-*/phases/cold.log"))
    assert logs and logs[0].stat().st_size <= HEAD_BYTES + TAIL_BYTES + 4096
    rss = json.loads((Path(str(hostile["out"])) / "controller.json").read_text())
    assert rss["finished"] - rss["collected"] < 100, rss  # MB: not the 200 MiB read


@pytest.mark.slow
def test_every_phase_process_names_its_check_and_phase(hostile: Dict[str, object]) -> None:
    run = hostile["run"]
    assert isinstance(run, RepoRun)
    said = [json.loads(p.read_text()) for p in Path(str(hostile["out"])).glob("[0-9]*.json")]
    launch = run.check("test_daemon")["launch"]
    assert sorted(s["marker"] for s in said) == [
        "test_hostile.py::test_daemon [cold]", "test_hostile.py::test_daemon [warm]"]
    for s in said:
        phase = s["marker"].split("[")[1].rstrip("]")
        if launch[phase] == "forked":  # a fresh one is `python` with the node id in its argv
            assert s["comm"] == f"{phase} test_daemon"[:15]
    assert launch == {"cold": "forked", "warm": "forked"} or sys.platform != "linux"
