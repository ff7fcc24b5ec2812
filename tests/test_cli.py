"""The CLI on bad input: a distinct exit status for errors, a newer schema refused, a
malformed report named in one line, and a damaged stored manifest said so. JSON only."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_compilecache.history import manifest as mf
from pytest_compilecache.history.store import ManifestStore
from pytest_compilecache.render import report as rp

ENV = {"torch": "2.13.0", "triton": None, "cuda": None, "python": "3.11.7", "device": "cpu",
       "device_name": None}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_compilecache", *args],
                          capture_output=True, text=True, timeout=60)


def report(checks, version=1):
    return {"schema": "pytest-compilecache/report", "schema_version": version,
            "created": "2026-11-23T00:00:00.000+00:00", "checks": checks}


def write(path: Path, data) -> str:
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


@pytest.mark.parametrize("data, says", [
    ("{not json", "cannot read"),
    ({"hello": 1}, "neither a pytest-compilecache report nor a key manifest"),
    (report([], version=rp.SCHEMA_VERSION + 1),
     f"newer pytest-compilecache (report schema_version {rp.SCHEMA_VERSION + 1}, this one "
     f"reads {rp.SCHEMA_VERSION})"),
    (report({"a": 1}), "'checks' is not a list"),
    (report([{"nodeid": "t.py::test_a"}]), "checks[0] (t.py::test_a) has no valid verdict: None"),
    ({**mf.new_manifest({"sha": "abc"}, ENV), "schema_version": 7}, "manifest schema_version 7"),
])
def test_a_broken_artifact_exits_2_with_one_line(tmp_path: Path, data, says) -> None:
    bad = write(tmp_path / "bad.json", data)
    good = write(tmp_path / "good.json", report([{"nodeid": "t.py::test_a", "verdict": "pass"}]))
    for args in (("diff", good, bad), ("show", bad), ("merge", good, bad, "-o", str(tmp_path / "m.json"))):
        proc = cli(*args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert says in proc.stderr and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "m.json").exists()  # merge wrote nothing


def test_a_reader_of_version_2_refuses_a_version_3_report_by_name(monkeypatch) -> None:
    """Version 3 keeps a passing graph's digest, not its components: a reader that would
    take its rows for a version 2's (every component inline) refuses it, as every older
    reader refuses a newer report; this reader reads 1 through 4 (4: a layer's state
    `accepted`)."""
    assert rp.SCHEMA_VERSION == 4
    for version in (1, 2, 3, 4):
        assert rp.problem(report([], version=version)) is None
    monkeypatch.setattr(rp, "SCHEMA_VERSION", 2)
    assert rp.problem(report([], version=3)) == (
        "written by a newer pytest-compilecache (report schema_version 3, this one reads 2): "
        "upgrade pytest-compilecache")


def test_an_unreadable_file_is_an_error_not_a_drift(tmp_path: Path) -> None:
    good = write(tmp_path / "good.json", report([{"nodeid": "t.py::test_a", "verdict": "pass"}]))
    proc = cli("diff", good, str(tmp_path / "missing.json"))
    assert proc.returncode == 2 and "cannot read" in proc.stderr
    assert cli("diff", good, good).returncode == 0


def test_a_damaged_stored_manifest_is_recorded_anew_and_said_so(tmp_path: Path) -> None:
    store = ManifestStore(tmp_path)
    path = store.merge({"sha": "abc", "dirty": False}, ENV, {"t.py::test_a": {"graphs": {}}})
    path.write_text('{"schema": "pytest-compilecache/manifest", "checks": ')  # cut short
    again = ManifestStore(tmp_path)
    again.merge({"sha": "abc", "dirty": False}, ENV, {"t.py::test_b": {"graphs": {}}})
    assert again.replaced_damaged == [str(path)]
    assert set(json.loads(path.read_text())["checks"]) == {"t.py::test_b"}


def test_clean_removes_kept_cache_roots_and_nothing_else(tmp_path, capsys,
                                                        monkeypatch) -> None:
    import os
    import tempfile

    from pytest_compilecache.cli import main
    from pytest_compilecache.isolation import CacheRoot
    from pytest_compilecache.leftovers import OWNER_FILE

    (tmp_path / "tmp").mkdir()  # the session dirs `clean` looks at: none of another test's
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    old = CacheRoot.create("tests/test_m.py::test_old", parent=str(tmp_path))
    (old.path / OWNER_FILE).write_text("999999999 1\n")  # a session that ended
    (old.inductor / "entry").write_bytes(b"x" * 1000)
    new = CacheRoot.create("tests/test_m.py::test_new", parent=str(tmp_path))  # a running one
    other = tmp_path / "compilecache-notes"  # a name alike, not a cache root
    other.mkdir()
    hour_ago = old.path.stat().st_mtime - 7200
    for p in (old.path, *(old.path / d for d in ("inductor", "triton", "tmp", "phases"))):
        os.utime(p, (hour_ago, hour_ago))
    assert main(["clean", "--root", str(tmp_path), "--dry-run"]) == 0
    assert old.path.exists() and "would remove" in capsys.readouterr().out
    assert main(["clean", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert not old.path.exists() and new.path.exists() and other.exists()
    assert f"removed {old.path}" in out and "1 kept cache root(s)" in out
    # this process made `new` and runs: in use, whatever its age
    assert main(["clean", "--root", str(tmp_path), "--min-age", "0"]) == 0
    out = capsys.readouterr().out
    assert new.path.exists() and f"left 1 in use by running session(s) (pid {os.getpid()})" \
        in out, out


def test_show_prints_the_trend_s_environment_whole(tmp_path: Path) -> None:
    # issue 52: the header was cut at 12 characters, `trend (environment torch2.13.0+):`
    env_id = "torch2.13.0+cpu-cpu-py3.11.7-825d3b2e"
    data = {**report([{"nodeid": "t.py::test_a", "verdict": "pass"}]),
            "trend": [{"environment": env_id, "error": "no history yet"}]}
    proc = cli("show", write(tmp_path / "r.json", data))
    assert proc.returncode == 0, proc.stderr
    assert f"trend (environment {env_id}):" in proc.stdout


def test_bisect_help_says_what_device_does() -> None:
    proc = cli("bisect", "--help")
    assert proc.returncode == 0
    said = " ".join(proc.stdout.split("--device {auto,cpu,cuda}")[-1].split())
    assert said.startswith("where the checks compile when a commit is recorded"), proc.stdout
