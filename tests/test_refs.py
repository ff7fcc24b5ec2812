"""Issue 52, point 6: `show` and `diff` take revisions (and check ids), as bisect does;
`diff main HEAD` said "cannot read main". A real git repository in a temp dir, a store
of two commits' manifests (one `nn.Linear`'s keys, `epilogue_fusion` flipped); the CLI
as an executable. JSON only: nothing compiles."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

from conftest import commit, git, new_repo
from pytest_compilecache.history import manifest as mf
from pytest_compilecache.history.store import ManifestStore

ENV = {"torch": "2.13.0", "triton": None, "cuda": None, "python": "3.11.7", "device": "cpu",
       "device_name": None}
OTHER = {**ENV, "torch": "2.15.0"}
NODE, SECOND = "t.py::test_a", "t.py::test_b"


def entry(fusion: str) -> Dict[str, Any]:
    comps = [["gm", "h1", "x = a * 2.0"], ["inductor_config[epilogue_fusion]", fusion, fusion]]
    return {"verdict": "pass", "graphs": {"fx_graph:0/0": {
        "layer": "fx_graph", "compile_id": "0/0", "backward": False, "state": "miss",
        "key": f"f{fusion}", "components": comps}}}


def repo_with_store(tmp_path: Path) -> Dict[str, Any]:
    repo = new_repo(tmp_path / "repo")
    first = commit(repo, "first", {"t.py": "x = 1\n"})
    git(repo, "checkout", "-q", "-b", "pr")
    second = commit(repo, "flip epilogue_fusion", {"t.py": "x = 2\n"})
    store = ManifestStore(repo / ".compilecache")
    for sha, fusion in ((first, "True"), (second, "False")):
        info = {"sha": sha, "short": sha[:10], "dirty": False, "subject": "s"}
        store.merge(info, ENV, {NODE: entry(fusion), SECOND: entry("True")})
    return {"repo": repo, "first": first, "second": second, "store": store}


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    return subprocess.run([sys.executable, "-m", "pytest_compilecache", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, env=env)


def test_diff_takes_two_revisions_and_check_ids(tmp_path: Path) -> None:
    r = repo_with_store(tmp_path)
    proc = cli("diff", "main", "HEAD", cwd=r["repo"])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"base: {r['first'][:10]}" in proc.stdout
    assert "drifted   t.py::test_a" in proc.stdout and "unchanged t.py::test_b" in proc.stdout
    assert "inductor_config[epilogue_fusion]: True -> False" in proc.stdout
    only = cli("diff", "main", "HEAD", SECOND, cwd=r["repo"])  # a check id, as bisect takes
    assert only.returncode == 0 and "test_a" not in only.stdout, only.stdout + only.stderr
    same = cli("diff", "HEAD~1", "main", cwd=r["repo"])
    assert same.returncode == 0, same.stdout + same.stderr


def test_show_takes_a_revision_and_a_file_is_still_a_file(tmp_path: Path) -> None:
    r = repo_with_store(tmp_path)
    proc = cli("show", "HEAD", NODE, cwd=r["repo"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"manifest of {r['second'][:10]}") and SECOND not in proc.stdout
    path = r["store"].path(mf.environment_id(ENV), r["first"])
    assert cli("show", str(path), cwd=tmp_path).returncode == 0
    missing = cli("show", "HEAD", "t.py::test_none", cwd=r["repo"])
    assert missing.returncode == 2 and "holds no check t.py::test_none" in missing.stderr


def test_a_revision_without_a_manifest_or_of_two_environments_says_what_to_do(
        tmp_path: Path) -> None:
    r = repo_with_store(tmp_path)
    commit(r["repo"], "third", {"t.py": "x = 3\n"})
    proc = cli("diff", "main", "HEAD", cwd=r["repo"])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "HEAD is commit" in proc.stderr and "holds no key manifest of it" in proc.stderr
    bad = cli("diff", "main", "nosuch", cwd=r["repo"])
    assert bad.returncode == 2 and "nosuch is not a file, nor a revision" in bad.stderr
    info = {"sha": r["first"], "short": r["first"][:10], "dirty": False}
    r["store"].merge(info, OTHER, {NODE: entry("True")})
    two = cli("show", "main", cwd=r["repo"])
    assert two.returncode == 2 and "pass --environment" in two.stderr, two.stderr
    chosen = cli("show", "main", "--environment", "torch2.15", cwd=r["repo"])
    assert chosen.returncode == 0 and "torch2.15.0" in chosen.stdout, chosen.stderr
    # diff picks the environment both commits have: HEAD~1's one
    assert cli("diff", "main", "HEAD~1", cwd=r["repo"]).returncode == 1
