"""Nothing lost under faults, with real processes and real signals: SIGTERM to the
controller mid-check (with and without xdist) and SIGKILL of an xdist worker. Every
process of the session carries a marker in its environment, so leftovers are found
wherever they were re-parented."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from conftest import MODELS
from pytest_compilecache.controller.session import PCH_DIR_ENV

pytestmark = pytest.mark.slow

TESTS = '''
import pytest
import torch

from models import MLP, Broken
from pytest_compilecache import ModelCase


@pytest.fixture
def mlp():
    return ModelCase(MLP(), example_inputs=(torch.randn(4, 16),))


@pytest.fixture
def broken():
    return ModelCase(Broken(), example_inputs=(torch.randn(4, 16),), train=True)


@pytest.mark.compile_cache
def test_a(mlp):
    ...


@pytest.mark.compile_cache
def test_b(broken):
    ...
'''


def marked(marker: str) -> List[Dict[str, str]]:
    """Live processes whose environment holds `marker` (zombies excluded)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if marker.encode() not in (d / "environ").read_bytes():
                continue
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z":
            found.append({"pid": d.name, "ppid": fields[1], "cmd": cmd})
    return found


def phase_processes(marker: str, name: Optional[str] = None) -> List[Dict[str, str]]:
    """The phase processes of the session (of check `name`), forked from a preloaded
    interpreter or fresh: their output goes to a phase log in the check's cache root.
    Their compile workers, which inherit that output, are left out."""
    found = []
    for p in marked(marker):
        try:
            out = os.readlink(f"/proc/{p['pid']}/fd/1")
        except OSError:
            continue
        if "/phases/" in out and out.endswith(".log") and (
                name is None or f"/compilecache-{name.replace('_', '-')}-" in out):
            found.append(p)
    pids = {p["pid"] for p in found}
    return [p for p in found if p["ppid"] not in pids]


def launcher_of(child: Dict[str, str]) -> int:
    """The process that launched a phase: its parent, or the parent of the preloaded
    interpreter that forked it."""
    ppid = child["ppid"]
    cmd = Path(f"/proc/{ppid}/cmdline").read_bytes()
    if b"pytest_compilecache.launch.forkserver" in cmd:
        ppid = (Path(f"/proc/{ppid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return int(ppid)


def wait_for(what, timeout: float = 400) -> object:
    end = time.time() + timeout
    while time.time() < end:
        got = what()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError("timed out waiting")


class Session:
    def __init__(self, path: Path, *args: str) -> None:
        path.mkdir(parents=True, exist_ok=True)
        (path / "models.py").write_text(MODELS)
        (path / "pytest.ini").write_text("[pytest]\n")
        (path / "test_models.py").write_text(TESTS)
        self.path, self.report, self.roots = path, path / "report.json", path / "roots"
        self.marker = f"COMPILECACHE_FAULT_TEST={uuid.uuid4().hex}"
        key, value = self.marker.split("=")
        # the session makes its own shared header dir, which an interrupt must not leak
        env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", PCH_DIR_ENV)}
        env.update({"PYTHONPATH": str(path), key: value})
        self.log = open(path / "session.log", "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v",
             "--compile-cache-check", f"--compile-cache-report={self.report}",
             f"--compile-cache-root={self.roots}", *args],
            cwd=path, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def out(self) -> str:
        return (self.path / "session.log").read_text()

    def phase_child(self, name: str) -> List[Dict[str, str]]:
        return phase_processes(self.marker, name)

    def finish(self) -> Dict[str, object]:
        self.proc.wait(timeout=300)
        self.log.close()
        # no process of the session outlives it by more than a few seconds
        end = time.time() + 10
        while marked(self.marker) and time.time() < end:
            time.sleep(0.5)
        assert not marked(self.marker), marked(self.marker)
        assert self.report.exists(), self.out()[-3000:]
        return json.loads(self.report.read_text())


def checks(report: Dict[str, object]) -> Dict[str, Dict[str, object]]:
    return {c["nodeid"].split("::")[-1]: c for c in report["checks"]}  # type: ignore[index]


def no_leaks(roots: Path) -> None:
    left = sorted(p.name for p in roots.iterdir()) if roots.exists() else []
    assert not [n for n in left if n.startswith("compilecache-shared-pch")], left
    assert not [n for n in left if n.startswith("compilecache-test-b")], left


def test_sigterm_to_the_controller_mid_check(tmp_path: Path) -> None:
    s = Session(tmp_path / "serial")
    wait_for(lambda: "test_a PASSED" in s.out())
    wait_for(lambda: s.phase_child("test_b"))
    s.proc.send_signal(signal.SIGTERM)
    report = s.finish()
    c = checks(report)
    assert c["test_a"]["verdict"] == "pass"
    assert c["test_b"]["verdict"] == "not run" and "SIGTERM" in c["test_b"]["error"]
    assert report["interrupted"] == {"by": "SIGTERM"}
    assert report["summary"]["not run"] == 1 and report["exitstatus"] == 2
    no_leaks(s.roots)


def test_sigterm_to_the_controller_under_xdist(tmp_path: Path) -> None:
    s = Session(tmp_path / "xdist", "-n", "2")
    wait_for(lambda: " PASSED " in s.out())
    still = wait_for(lambda: phase_processes(s.marker))
    s.proc.send_signal(signal.SIGTERM)
    report = s.finish()
    assert report["interrupted"] == {"by": "SIGTERM"}
    c = checks(report)
    assert set(c) == {"test_a", "test_b"}, s.out()[-3000:]  # every selected check is there
    verdicts = sorted(x["verdict"] for x in c.values())
    assert verdicts == ["not run", "pass"], (still, s.out()[-3000:])  # the finished one kept
    no_leaks(s.roots)


def test_sigkill_of_an_xdist_worker(tmp_path: Path) -> None:
    s = Session(tmp_path / "killed", "-n", "2")
    child = wait_for(lambda: s.phase_child("test_b"))[0]  # type: ignore[index]
    os.kill(launcher_of(child), signal.SIGKILL)  # its xdist worker, as the OOM killer would
    report = s.finish()
    c = checks(report)
    assert c["test_b"]["verdict"] == "error", s.out()[-3000:]
    assert "died without a result" in c["test_b"]["error"]
    assert report["summary"]["error"] >= 1 and report["exitstatus"] == 1
