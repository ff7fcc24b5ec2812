"""Issue 38, items 1-3: manifests true to the work tree, one bounded JSON loader, and a
report shared by sessions that never loses a verdict silently.

No test here compiles: the sessions stop at once (a plain test calls pytest.exit before
the check runs, so the check is in the report as `not run`, with the session's commit),
or only collect; the CLI reads crafted files; loaders are called directly."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, Optional

import pytest

from conftest import commit, git
from pytest_compilecache import jsonfile
from pytest_compilecache.history import git as history
from pytest_compilecache.history import manifest as mf
from pytest_compilecache.history.store import ManifestStore
from pytest_compilecache.history.untracked import session_reads

CHECK = '''
import pytest

@pytest.mark.compile_cache
def test_x():
    pass
'''
# runs before the check (file order) and ends the session: the check is `not run`;
# with $WAIT_FOR set, it first says it started and waits for that file
STOP = '''
import os, pathlib, time
import pytest

def test_a():
    wait = os.environ.get("WAIT_FOR")
    if wait:
        pathlib.Path(wait + ".started").write_text("")
        deadline = time.time() + 120
        while not os.path.exists(wait) and time.time() < deadline:
            time.sleep(0.05)
    pytest.exit("stopped before the check")
'''


def deep(path: Path, levels: int = 200_000) -> Path:
    path.write_text("[" * levels + "]" * levels)
    return path


def repo_with_check(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q")
    commit(path, "first", {"pytest.ini": "[pytest]\n", "test_a.py": STOP, "test_c.py": CHECK})
    return path


def session(repo: Path, *args: str, env: Optional[Dict[str, str]] = None,
            wait: bool = True) -> Any:
    base = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "WAIT_FOR")}
    # a phase per fresh interpreter: these sessions end before their check or run one, so
    # the preloaded launcher's two interpreters (torch imported in each) would save nothing
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
           "--compile-cache-check", f"--compile-cache-root={repo.parent / 'roots'}",
           "--compile-cache-launcher=fresh", *args]
    (repo.parent / "roots").mkdir(mode=0o700, exist_ok=True)
    if not wait:
        return subprocess.Popen(cmd, cwd=repo, env={**base, **(env or {})},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(cmd, cwd=repo, env={**base, **(env or {})}, capture_output=True,
                          text=True, timeout=300)


# -- item 2: one loader, bounded ------------------------------------------------------------
def test_the_loader_bounds_depth_and_size_and_names_the_file(tmp_path, monkeypatch) -> None:
    with pytest.raises(jsonfile.Unreadable, match="nested deeper than 64 levels") as e:
        jsonfile.load(deep(tmp_path / "deep.json"))
    assert e.value.path == str(tmp_path / "deep.json")
    fine = "[" * 60 + "]" * 60  # parseable but still too deep for our readers: bounded
    (tmp_path / "d70.json").write_text("[" * 70 + "]" * 70)
    (tmp_path / "d60.json").write_text(fine)
    with pytest.raises(jsonfile.Unreadable, match="deeper than 64"):
        jsonfile.load(tmp_path / "d70.json")
    assert jsonfile.load(tmp_path / "d60.json") is not None
    big = tmp_path / "big.json"
    big.write_text(json.dumps(["x" * 1000] * 2000))  # ~2 MB
    monkeypatch.setenv(jsonfile.MAX_MB_ENV, "1")
    with pytest.raises(jsonfile.Unreadable, match=f"over 1 MiB.*set {jsonfile.MAX_MB_ENV}"):
        jsonfile.load(big)
    monkeypatch.setenv(jsonfile.MAX_MB_ENV, "4")
    assert len(jsonfile.load(big)) == 2000
    with pytest.raises(FileNotFoundError):
        jsonfile.load(tmp_path / "none.json")


def test_memory_errors_are_said_naming_the_file(tmp_path, monkeypatch) -> None:
    p = tmp_path / "r.json"
    p.write_text("[]")

    def exhausted(*args: Any, **kwargs: Any) -> Any:
        raise MemoryError

    monkeypatch.setattr(json, "loads", exhausted)
    with pytest.raises(jsonfile.Unreadable, match="not enough memory to parse it") as e:
        jsonfile.load(p)
    assert e.value.path == str(p)


def test_a_deep_stored_manifest_is_a_bad_manifest_naming_the_file(tmp_path) -> None:
    """The issue's crash: keyhistory.gone_checks -> store._read raised RecursionError."""
    store = ManifestStore(tmp_path / "store")
    p = store.path("env", "a" * 40)
    p.parent.mkdir(parents=True)
    deep(p)
    assert store.load("env", "a" * 40) is None  # gone_checks: nothing to list
    with pytest.raises(mf.BadManifest, match="nested deeper than 64.*delete .* re-record"):
        store.read("env", "a" * 40)


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    return subprocess.run([sys.executable, "-m", "pytest_compilecache", *args],
                          capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("command", ["show", "diff", "merge"])
def test_the_cli_on_a_deep_file_exits_2_naming_it(tmp_path, command) -> None:
    """Before: a RecursionError traceback and exit 1 (for diff: "keys differ")."""
    bad = deep(tmp_path / "bad.json")
    good = Path(__file__).parent / "data" / "report_drift.json"
    args = {"show": [str(bad)], "diff": [str(good), str(bad)],
            "merge": [str(good), str(bad), "-o", str(tmp_path / "m.json")]}[command]
    proc = cli(command, *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"cannot read {bad}: nested deeper than 64 levels" in proc.stderr
    assert "pass a report or key manifest" in proc.stderr


def test_a_deep_report_at_the_report_path_is_set_aside_and_loses_nothing(tmp_path) -> None:
    """Before: RecursionError from pytest_sessionfinish, no report, every verdict lost."""
    repo = repo_with_check(tmp_path / "repo")
    report = deep(tmp_path / "report.json")
    proc = session(repo, f"--compile-cache-report={report}")
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out and "RecursionError" not in out, out[-3000:]
    data = json.loads(report.read_text())
    assert [(c["nodeid"], c["verdict"]) for c in data["checks"]] == [("test_c.py::test_x",
                                                                      "not run")]
    # an earlier session's report is set aside as the session starts (issue 38 item 5),
    # so the deep file is never read: it is kept, beside, for the user
    aside = Path(str(report) + ".previous")
    assert aside.exists() and aside.stat().st_size > 100_000


def test_a_deep_shard_times_file_is_a_usage_error_naming_it(tmp_path) -> None:
    """Before: INTERNALERROR, exit 3."""
    repo = repo_with_check(tmp_path / "repo")
    times = deep(tmp_path / "times.json")
    proc = session(repo, "--compile-cache-shard=1/2", f"--compile-cache-shard-times={times}",
                   "--collect-only")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "INTERNALERROR" not in proc.stdout + proc.stderr
    assert f"--compile-cache-shard-times: {times} cannot be read: nested deeper" in proc.stderr
    assert "pass the --compile-cache-report of an earlier full run" in proc.stderr
    (tmp_path / "wrong.json").write_text('{"checks": 3}')
    proc = session(repo, "--compile-cache-shard=1/2",
                   f"--compile-cache-shard-times={tmp_path / 'wrong.json'}", "--collect-only")
    assert proc.returncode == 4 and "not a pytest-compilecache report" in proc.stderr


# -- item 1: untracked files the session reads make the tree dirty ---------------------------
def test_untracked_files_the_session_reads_make_the_tree_dirty_and_are_named(tmp_path) -> None:
    """git processes, the plugin's predicate: a conftest, an ini file, an importable
    module count; notes, .gitignored build outputs and files off the import path don't."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    commit(repo, "first", {"t.py": "x = 1\n", ".gitignore": "build/\n"})
    reads = session_reads([str(repo)], [])
    (repo / "notes.txt").write_text("scratch")
    (repo / "build").mkdir()
    (repo / "build" / "gen.py").write_text("x = 1\n")  # ignored: not listed by git
    assert history.commit_info(repo, reads)["dirty"] is False
    elsewhere = session_reads([str(tmp_path / "src")], [])  # repo not on the path
    (repo / "helper.py").write_text("x = 1\n")
    assert history.commit_info(repo, elsewhere)["dirty"] is False
    assert history.commit_info(repo, reads)["untracked"] == ["helper.py"]
    (repo / "helper.py").unlink()
    (repo / "sub").mkdir()
    (repo / "sub" / "conftest.py").write_text("")
    (repo / "tox.ini").write_text("[pytest]\n")
    info = history.commit_info(repo, elsewhere)
    assert info["dirty"] is True and info["untracked"] == ["sub/conftest.py", "tox.ini"]
    loaded = session_reads([], [str(repo / "notes.txt")])  # a loaded module's file counts
    assert history.commit_info(repo, loaded)["untracked"] == ["notes.txt", "sub/conftest.py",
                                                               "tox.ini"]
    assert history.commit_info(repo)["dirty"] is False  # without a predicate: as before
    (repo / "roots" / "inductor").mkdir(parents=True)  # --compile-cache-root=roots
    (repo / "roots" / "inductor" / "c1.py").write_text("")
    (repo / "roots" / "conftest.py").write_text("")
    assert history.commit_info(repo, session_reads([str(repo)], [], own=[str(repo / "roots")])
                               )["untracked"] == ["sub/conftest.py", "tox.ini"]
    label = mf.commit_label({"commit": info})
    assert "(dirty: untracked sub/conftest.py, tox.ini)" in label


def test_a_planted_conftest_makes_the_session_commit_dirty_naming_it(tmp_path) -> None:
    """The issue's poisoning: a never-committed root conftest.py counted as clean, so its
    keys were merged into the clean commit's manifest. The session's commit (the one its
    manifests are filed under) is dirty now, naming it; a scratch file is not."""
    repo = repo_with_check(tmp_path / "repo")
    (repo / "notes.txt").write_text("scratch")
    report = tmp_path / "r.json"
    session(repo, f"--compile-cache-report={report}")
    assert json.loads(report.read_text())["commit"]["dirty"] is False
    (repo / "conftest.py").write_text("import os\n")
    proc = session(repo, f"--compile-cache-report={report}")
    c = json.loads(report.read_text())["commit"]
    assert c["dirty"] is True and c["untracked"] == ["conftest.py"], proc.stdout[-2000:]
    assert ManifestStore(tmp_path).path("env", c["sha"], c["dirty"]).name.endswith("-dirty.json")


# -- issue 52, point 3: the environment is not the tree; what git ignores may be -------------
def venv_in(repo: Path) -> Path:
    """A virtualenv inside the checkout, not ignored by git (the README's `.venv`): its
    site-packages holds an installed package, with a conftest.py of its own."""
    site = repo / ".venv" / "lib" / "python3.11" / "site-packages"
    (site / "fakepkg").mkdir(parents=True)
    (repo / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (site / "fakepkg" / "__init__.py").write_text("VALUE = 1\n")
    (site / "fakepkg" / "conftest.py").write_text("")
    (repo / ".venv" / "bin").mkdir()
    (repo / ".venv" / "bin" / "activate_this.py").write_text("")
    return site


def test_installed_packages_never_make_the_tree_dirty_wherever_the_venv_lives(tmp_path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    commit(repo, "first", {"t.py": "x = 1\n"})
    site = venv_in(repo)
    # not this interpreter's prefix: another venv, on the path, its package loaded
    reads = session_reads([str(repo), str(site)], [str(site / "fakepkg" / "__init__.py")],
                          prefixes=[])
    info = history.commit_info(repo, reads)
    assert info["dirty"] is False, info
    (repo / "helper.py").write_text("")  # the project's own untracked module still counts
    assert history.commit_info(repo, reads)["untracked"] == ["helper.py"]


def test_a_file_the_session_read_makes_the_tree_dirty_though_git_ignores_it(tmp_path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    commit(repo, "first", {"t.py": "x = 1\n", ".gitignore": "build/\n"})
    (repo / ".git" / "info" / "exclude").write_text("conftest.py\npytest.ini\n")
    (repo / "conftest.py").write_text("import torch\n")
    (repo / "pytest.ini").write_text("[pytest]\n")
    (repo / "build").mkdir()
    (repo / "build" / "gen.py").write_text("x = 1\n")  # ignored, read by nothing
    reads = session_reads([str(repo)], [str(repo / "conftest.py"), str(repo / "t.py")])
    info = history.commit_info(repo, reads)
    assert info["dirty"] is True and info["ignored"] == ["conftest.py", "pytest.ini"], info
    assert "untracked" not in info and "modified" not in info
    (repo / "t.py").write_text("x = 2\n")
    info = history.commit_info(repo, reads)
    assert info["modified"] == ["t.py"], info
    assert mf.dirty_causes(info) == "modified t.py; ignored by git but read conftest.py, pytest.ini"


def test_a_dirty_session_says_so_in_one_line_with_what_it_turns_off(tmp_path) -> None:
    """A real session: a conftest kept out of git by .git/info/exclude (it used to write
    its keys to the clean commit's manifest), and a venv in the checkout whose installed
    package the tests import (it used to list the venv's files)."""
    repo = repo_with_check(tmp_path / "repo")
    site = venv_in(repo)
    (repo / "test_a.py").write_text("import fakepkg\n" + STOP)
    git(repo, "commit", "-qam", "import fakepkg")
    env = {"PYTHONPATH": str(site)}
    report = tmp_path / "r.json"
    proc = session(repo, f"--compile-cache-report={report}", env=env)
    c = json.loads(report.read_text())["commit"]
    assert c["dirty"] is False, (c, proc.stdout[-2000:])
    assert "work tree dirty" not in proc.stdout
    (repo / ".git" / "info" / "exclude").write_text("conftest.py\n")
    (repo / "conftest.py").write_text("import os\n")
    proc = session(repo, f"--compile-cache-report={report}", env=env)
    c = json.loads(report.read_text())["commit"]
    assert c["dirty"] is True and c["ignored"] == ["conftest.py"], (c, proc.stdout[-2000:])
    said = [line for line in proc.stdout.splitlines() if line.startswith("work tree dirty")]
    assert said == [f"work tree dirty (ignored by git but read conftest.py): its keys go to "
                    f"{c['short']}-dirty.json, replaced by the next dirty run, not to the "
                    f"commit's manifest; no trend point, and no trend shown"], proc.stdout[-2000:]


# -- item 3: a report shared by sessions on different commits --------------------------------
def _report(nodeid: str, sha: str) -> Dict[str, Any]:
    from pytest_compilecache.render import report

    return {"schema": report.SCHEMA, "schema_version": report.SCHEMA_VERSION,
            "created": report.now(), "summary": {"pass": 1},
            "commit": {"sha": sha, "short": sha[:10], "dirty": False},
            "writer": {"pid": 1, "host": "h", "started": "s"},
            "checks": [{"nodeid": nodeid, "verdict": "pass"}]}


def test_merging_that_would_replace_a_verdict_writes_beside_it(tmp_path) -> None:
    """One commit and other checks: merged as before; the same check (even on one
    commit), or another commit's report: left as it is, ours beside it."""
    from pytest_compilecache.render import report

    path = str(tmp_path / "r.json")
    started = report.now()
    report.write_report(path, _report("t.py::a", "1" * 40))
    merged = report.write_report_to(path, _report("t.py::b", "1" * 40), since=started)
    assert merged.path == path and merged.said == []
    assert len(json.loads(Path(path).read_text())["checks"]) == 2
    for sha, why in (("1" * 40, "ran 1 of the same check(s) (t.py::b)"),
                     ("2" * 40, "ran 1 of the same check(s) (t.py::b) on another commit")):
        w = report.write_report_to(path, _report("t.py::b", sha), since=started)
        assert w.path != path and Path(w.path).name.startswith(f"r.{sha[:10]}-")
        assert why in w.said[0] and "pid 1 on h" in w.said[0]
        assert len(json.loads(Path(path).read_text())["checks"]) == 2  # left as it was
        Path(w.path).unlink()
    w = report.write_report_to(path, _report("t.py::c", "2" * 40), since=started)
    assert w.path != path and w.said[0].endswith(
        "on another commit; merged, one session's verdicts would replace the other's, so it "
        f"is left as it is and this session's report is {w.path} (`pytest-compilecache "
        "merge` joins reports of one commit)")


def test_two_sessions_on_different_commits_keep_both_reports_and_name_each_other(tmp_path):
    """Before: the later writer replaced the other's verdict for the same node id,
    silently. Session A (commit 1) starts, B (commit 2, same check) writes the report
    while A runs, then A ends: B's report stays, A's goes beside it naming B."""
    repo = repo_with_check(tmp_path / "repo")
    other = tmp_path / "other"
    git(repo, "worktree", "add", "-q", "--detach", str(other))
    second = commit(other, "second", {"test_c.py": CHECK + "\n# changed\n"})
    report = tmp_path / "r.json"
    flag = tmp_path / "b-done"
    a = session(repo, f"--compile-cache-report={report}", env={"WAIT_FOR": str(flag)},
                wait=False)
    try:
        deadline = time.time() + 120
        while not Path(str(flag) + ".started").exists() and time.time() < deadline:
            assert a.poll() is None, a.stdout.read() if a.stdout else ""
            time.sleep(0.05)
        b = session(other, f"--compile-cache-report={report}")
        assert b.returncode == 2 and report.exists(), b.stdout[-2000:]  # pytest.exit: 2
        flag.write_text("")
        out, _ = a.communicate(timeout=120)
    finally:
        if a.poll() is None:
            a.kill()
    kept = json.loads(report.read_text())
    assert kept["commit"]["sha"] == second and kept["checks"][0]["verdict"] == "not run"
    beside = [p for p in tmp_path.glob("r.*.json")]
    assert len(beside) == 1, out[-3000:]
    mine = json.loads(beside[0].read_text())
    assert mine["commit"]["sha"] != second
    assert [c["nodeid"] for c in mine["checks"]] == ["test_c.py::test_x"]
    w = kept["writer"]
    assert f"report written to {beside[0]}" in out
    assert (f"{report} was written while this session ran by another session (pid "
            f"{w['pid']} on {w['host']}") in " ".join(out.split())
    assert "ran 1 of the same check(s) (test_c.py::test_x) on another commit" in out


MODEL_TEST = '''
import pytest
import torch

from pytest_compilecache import ModelCase


@pytest.fixture
def net():
    return ModelCase(torch.nn.Linear(8, 8), example_inputs=(torch.randn(2, 8),))


@pytest.mark.compile_cache
def test_net(net):
    ...
'''


@pytest.mark.slow
def test_a_planted_conftest_and_a_deep_baseline_manifest_lose_nothing(tmp_path):
    """The issue's two scenarios in one compiled session (one cold phase): an untracked
    root conftest.py that sets an Inductor option, and the baseline's stored manifest
    nesting 200,000 lists. The keys go to the commit's -dirty manifest, naming the file,
    and the clean commit's manifest is not written; the deep manifest is the check's
    problem naming it (was a RecursionError from pytest_sessionfinish: no summary, no
    report, every verdict lost)."""
    from pytest_compilecache.child.workload import environment_of_python

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    sha = commit(repo, "first", {"pytest.ini": "[pytest]\n", "test_net.py": MODEL_TEST})
    (repo / "conftest.py").write_text(
        "import torch\ntorch._inductor.config.epilogue_fusion = False\n")
    store = ManifestStore(repo / ".compilecache")
    baseline = store.path(mf.environment_id(environment_of_python("cpu")), sha)
    baseline.parent.mkdir(parents=True)
    deep(baseline)
    report = tmp_path / "r.json"
    proc = session(repo, "--compile-cache-manifest-only", "--compile-cache-baseline=HEAD",
                   "--compile-cache-device=cpu", f"--compile-cache-report={report}")
    out = proc.stdout + proc.stderr
    assert "RecursionError" not in out and "INTERNALERROR" not in out, out[-3000:]
    (check,) = json.loads(report.read_text())["checks"]
    assert any(f"the key manifest {baseline} is unusable: cannot be read (" in p
               and "nested deeper than 64 levels" in p for p in check["problems"]), check
    found = {p.name: p for p in baseline.parent.glob("*.json")}
    assert set(found) == {f"{sha}.json", f"{sha}-dirty.json"}, out[-3000:]
    assert found[f"{sha}.json"].read_text().startswith("[[[")  # never merged into
    stored = json.loads(found[f"{sha}-dirty.json"].read_text())
    assert stored["commit"]["untracked"] == ["conftest.py"]
    assert "(dirty: untracked conftest.py)" in mf.commit_label(stored)


def test_a_deep_report_a_concurrent_session_wrote_is_replaced_and_said(tmp_path) -> None:
    """A report at the path that appeared after this session started (another session's,
    damaged): the loader names it; the session's own report is written, nothing raised."""
    from pytest_compilecache.render import report as rp

    target = deep(tmp_path / "report.json")
    said = rp.write_report(str(target), {"checks": [{"nodeid": "t.py::test_x", "via": "local",
                                                     "verdict": "pass"}]},
                           since="2000-01-01T00:00:00+00:00")
    assert any(f"the report already at {target} could not be merged into" in s and
               "nested deeper than 64 levels" in s for s in said), said
    assert [c["nodeid"] for c in json.loads(target.read_text())["checks"]] == ["t.py::test_x"]


# -- issue 53, item 6: what is no regular file is refused before it blocks ---------------
def _unblocked(call: Any, fifo: Path) -> Any:
    """`call()`'s result or exception, failing where it blocks on `fifo` (a writer then
    releases it, so that the suite goes on)."""
    import threading

    got: Dict[str, Any] = {}

    def run() -> None:
        try:
            got["value"] = call()
        except BaseException as e:  # noqa: B036 - handed back to the test
            got["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(10)
    if t.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        t.join(10)
        pytest.fail(f"blocked on the FIFO {fifo}")
    if "error" in got:
        raise got["error"]
    return got.get("value")


def test_a_fifo_in_place_of_a_json_file_is_refused_without_blocking(tmp_path) -> None:
    """`show <fifo>` blocked forever, and so did a session whose stored manifest was a
    FIFO (issue 53): the loader opened before it looked."""
    from pytest_compilecache import files as fs

    fifo = tmp_path / "m.json"
    os.mkfifo(fifo)
    for gz in (False, True):
        with pytest.raises(jsonfile.Unreadable, match="a FIFO .named pipe., not a regular "
                                                      "file: reading it could block"):
            _unblocked(lambda: jsonfile.load(fifo, gz=gz), fifo)
    store = ManifestStore(tmp_path / "store")
    planted = store.path("env", "abc")
    planted.parent.mkdir(parents=True)
    os.mkfifo(planted)
    with pytest.raises(mf.BadManifest, match="a FIFO"):
        _unblocked(lambda: store.read("env", "abc"), planted)
    proc = subprocess.run([sys.executable, "-m", "pytest_compilecache", "show", str(fifo)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "a FIFO (named pipe), not a regular file" in proc.stderr
    probe = tmp_path / "inductor" / "ab" / "k.cpp"  # a phase's file, read to tell probes
    probe.parent.mkdir(parents=True)
    os.mkfifo(probe)
    watched = {"inductor": str(tmp_path / "inductor")}
    assert _unblocked(lambda: fs.cpu_capability_probes(watched, ["inductor/ab/k.cpp"]),
                      probe) == set()
