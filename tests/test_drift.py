"""Cache-key drift across commits: real git repositories of a tiny model package, real
pytest sessions on CPU Inductor, manifests in a real store.

One repository with six commits serves every test in this module, in order:
  c0 first · c1 comment only · c2 sets an inductor config value in the package ·
  c3 comment only · c4 changes a constant in forward · c5 comment only
Manifests recorded by one test are reused by later ones (as the store promises), and
the caches one keeps (--compile-cache-store-caches) by the deploy scenario after it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import commit, git
from pytest_compilecache.controller.session import PCH_DIR_ENV
from pytest_compilecache.history.blobs import ComponentBlobs

pytestmark = pytest.mark.slow

MODEL = '''
import torch

SCALE = 2.0


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(16, 16)

    def forward(self, x):
        return torch.relu(self.l1(x)) * SCALE
'''

TEST = '''
import pytest
import torch

from pkg.model import Net
from pytest_compilecache import ModelCase


@pytest.fixture
def net():
    return ModelCase(Net(), example_inputs=(torch.randn(4, 16),))


@pytest.mark.compile_cache
def test_net(net):
    ...
'''

NODE = "tests/test_net.py::test_net"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, object]:
    path = tmp_path_factory.mktemp("model_repo")
    git(path, "init", "-q")
    shas: List[str] = []
    init = "import torch  # noqa: F401\n"
    shas.append(commit(path, "first", {
        "pytest.ini": "[pytest]\npythonpath = .\n", "pkg/__init__.py": init,
        "pkg/model.py": MODEL, "tests/test_net.py": TEST}))
    shas.append(commit(path, "explain the model", {
        "pkg/model.py": MODEL.replace("class Net", "# a tiny model\nclass Net")}))
    shas.append(commit(path, "tune inductor", {
        "pkg/__init__.py": init + "torch._inductor.config.epilogue_fusion = False\n"}))
    shas.append(commit(path, "document", {"README.md": "a model\n"}))
    shas.append(commit(path, "scale by three", {
        "pkg/model.py": MODEL.replace("class Net", "# a tiny model\nclass Net")
                             .replace("SCALE = 2.0", "SCALE = 3.0")}))
    shas.append(commit(path, "more docs", {"README.md": "a model\nmore\n"}))
    return {"path": path, "shas": shas}


def run(path: Path, *args: str, cwd: Path = None, tmp: Path = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    if tmp is not None:  # the session's own temp dir, to see what it leaves there
        env["TMPDIR"] = str(tmp)
        env.pop(PCH_DIR_ENV, None)  # and its own header dir there, to be removed too
    return subprocess.run([sys.executable, *args], cwd=cwd or path, env=env,
                          capture_output=True, text=True, timeout=900)


def check_session(path: Path, *args: str, tmp: Path = None) -> Dict[str, object]:
    report = path.parent / f"{path.name}-report.json"
    if report.exists():
        report.unlink()
    proc = run(path, "-m", "pytest", "-p", "no:cacheprovider", "--compile-cache-check",
               f"--compile-cache-report={report}", *args, tmp=tmp)
    assert report.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(report.read_text())
    (c,) = [c for c in data["checks"] if c["nodeid"] == NODE]
    return {"ret": proc.returncode, "out": proc.stdout + proc.stderr, "check": c, "report": data}


def manifests(path: Path) -> Dict[str, dict]:
    out = {}
    for f in (path / ".compilecache" / "manifests").rglob("*.json"):
        out[f.stem] = json.loads(f.read_text())
    return out


def test_comment_only_change_has_no_drift(repo, tmp_path):
    path, shas = repo["path"], repo["shas"]
    git(path, "checkout", "-q", shas[1])
    s = check_session(path, "--compile-cache-manifest-only", f"--compile-cache-baseline={shas[0]}",
                      tmp=tmp_path)
    assert s["ret"] == 0, s["out"][-3000:]
    # the baseline was recorded, and its log dir removed with the session's other dirs
    assert [p.name for p in tmp_path.iterdir()] == [], list(tmp_path.iterdir())
    assert s["check"]["verdict"] == "recorded"
    assert s["check"]["drift"]["status"] == "unchanged"
    assert s["check"]["drift"]["base_sha"] == shas[0]
    stored = manifests(path)
    # the baseline was recorded in a worktree; this run's manifest is stored for c1, clean
    assert shas[0] in stored and shas[1] in stored
    # the baseline keys only (stopped before code generation), this commit's in full
    assert stored[shas[0]]["checks"][NODE]["keys_only"] is True
    assert "keys_only" not in stored[shas[1]]["checks"][NODE]
    assert stored[shas[1]]["commit"]["dirty"] is False
    assert stored[shas[1]]["commit"]["subject"] == "explain the model"
    graphs = stored[shas[1]]["checks"][NODE]["graphs"]
    assert {"aot_autograd:0/0", "fx_graph:0/0"} <= set(graphs)
    # a row keeps its components' digest; the store keeps them, once each
    assert stored[shas[1]]["schema_version"] == 2
    fx = graphs["fx_graph:0/0"]
    assert "components" not in fx and fx["components_count"] > 100
    blob = ComponentBlobs(path / ".compilecache").get(fx["components_digest"], "-")
    assert any(c[0] == "gm" for c in blob)
    assert (path / ".compilecache" / ".gitignore").exists()
    assert git(path, "status", "--porcelain") == ""  # the store leaves the tree clean


def test_config_set_in_the_package_drifts_and_names_the_component(repo, tmp_path):
    path, shas = repo["path"], repo["shas"]
    git(path, "checkout", "-q", shas[2])
    # an allow-list that names another component accepts nothing here (the rule that
    # accepts exactly the matching drift is unit-tested in test_manifest.py)
    s = check_session(path, "--compile-cache-manifest-only", f"--compile-cache-baseline={shas[1]}",
                      "--compile-cache-allow-drift=gm,triton_config[*]", tmp=tmp_path)
    assert s["ret"] == 1, s["out"][-3000:]
    # issue 52: a recording that failed on drift kept its root "for inspection", though
    # the report says all there is (78 such dirs in the temp dir after one afternoon)
    assert "cache_root" not in s["check"] or s["check"]["cache_root"] is None, s["check"]
    left = [p.name for p in tmp_path.iterdir() if p.name.startswith("compilecache-")]
    assert left == [], left
    assert "kept for inspection" not in s["out"]
    assert s["report"]["settings"]["allow_drift"] == ["gm", "triton_config[*]"]
    c = s["check"]
    assert c["verdict"] == "fail" and c["drift"]["status"] == "drifted"
    comps = {x["component"]: x for g in c["drift"]["graphs"] for x in g["components"]}
    assert comps["inductor_config[epilogue_fusion]"]["old"] == "True"
    assert comps["inductor_config[epilogue_fusion]"]["new"] == "False"
    assert "gm" not in comps
    assert "inductor_config[epilogue_fusion]: True -> False" in s["out"]
    assert "explain the model" in s["out"]  # the baseline commit is named


def test_graph_change_drifts_with_a_graph_code_diff(repo):
    path, shas = repo["path"], repo["shas"]
    git(path, "checkout", "-q", shas[4])
    (path / "README.md").write_text("local edit\n")  # a dirty work tree is recorded as such
    s = check_session(path, "--compile-cache-manifest-only", f"--compile-cache-baseline={shas[3]}")
    git(path, "checkout", "-q", "--", "README.md")
    assert s["ret"] == 1, s["out"][-3000:]
    fx = [g for g in s["check"]["drift"]["graphs"] if g["graph"] == "fx_graph:0/0"][0]
    assert [x["component"] for x in fx["components"]] == ["gm"]
    # the failure says how to accept a change that is meant
    assert any(p.endswith(f"accept it in the repository: `pytest-compilecache accept "
                          f"{shas[3]}` (writes compilecache-accepted.json: commit it with "
                          f"the change)") for p in s["check"]["problems"]), s["check"]["problems"]
    # c3's keys-only recording drifted from this compile in full: c3 was recorded again
    # in full, and the drift stands (the verdict a baseline compiled in full gives)
    assert any("recorded again compiled in full: the drift is confirmed" in n
               for n in s["check"]["notes"]), s["check"]["notes"]
    assert "keys_only" not in manifests(path)[shas[3]]["checks"][NODE]
    diff = "\n".join(fx["graph_code_diff"])
    assert "-    mul = torch.ops.aten.mul.Tensor(relu, 2.0)" in diff
    assert "+    mul = torch.ops.aten.mul.Tensor(relu, 3.0)" in diff
    assert s["report"]["commit"]["dirty"] is True
    assert f"{shas[4]}-dirty" in manifests(path)


def test_a_deploy_over_the_caches_main_kept_skips_the_baseline_compile(repo, tmp_path):
    """Main's run keeps each passing check's caches in the store; a later commit that
    changes no key (a README edit) deploys over them: no worktree, no compile of the
    baseline, every layer hit and the fresh compile of this commit agrees. (A commit that
    flips an Inductor config, deployed over main's caches, is named: tests/test_pr_lane.py,
    the same rule as the worktree's deploy: tests/test_deploy.py.)"""
    path, shas = repo["path"], repo["shas"]
    git(path, "checkout", "-q", shas[1])
    main = check_session(path, "--compile-cache-store-caches")
    assert main["ret"] == 0 and main["check"]["verdict"] == "pass", main["out"][-3000:]
    kept = [n for n in main["check"]["notes"] if n.startswith("its caches are kept in the store")]
    assert kept, main["check"]["notes"]
    (saved,) = (path / ".compilecache" / "caches").glob(f"*/{shas[1]}/*")
    assert (saved / "phases" / "cold.json").is_file() and list((saved / "inductor").rglob("*.py"))
    assert all(p.stat().st_mode & 0o077 == 0 for p in [saved, *saved.rglob("*")])  # code: private
    (path / "README.md").write_text("a model that changed no key\n")
    try:
        s = check_session(path, f"--compile-cache-baseline={shas[1]}",
                          "--compile-cache-baseline-warm", tmp=tmp_path)
    finally:
        git(path, "checkout", "-q", "--", ".")
        (path / "README.md").unlink(missing_ok=True)
    c = s["check"]
    assert s["ret"] == 0 and c["verdict"] == "pass", s["out"][-3000:]
    assert c["launch"]["cold"] == "stored", c["launch"]
    assert "cold_process_s" not in c["timings"] and c["timings"]["fresh_process_s"] > 0
    assert any(f"kept in the store with its caches ({saved}" in n for n in c["notes"]), c["notes"]
    # restored where main compiled it (its Triton kernels are named by absolute path)
    meta = json.loads((saved / "meta.json").read_text())
    assert any(n.endswith(f"restored at the path it was compiled in, {meta['root']}")
               for n in c["notes"]), (meta, c["notes"])
    for layer in ("aot_autograd", "fx_graph", "kernels"):
        assert c["layers"][layer]["state"] == "hit", (layer, c["layers"][layer])
    assert [p.name for p in tmp_path.iterdir()] == []  # no worktree, nothing left behind


def test_bisect_finds_the_first_drifting_commit(repo):
    """GOOD's stored manifest also holds a check these arguments do not select (a session
    that checked more): bisect compares the checks its arguments select, learnt from a
    collect-only session at GOOD (seconds), and reads GOOD's keys from the store instead
    of recording them again (issue 38: a recording compiles every check). GOOD is c1,
    whose keys were recorded compiled in full: c0's are a baseline's keys-only recording,
    which bisect would record again (it compares full recordings only)."""
    path, shas = repo["path"], repo["shas"]
    (good,) = [f for f in (path / ".compilecache" / "manifests").rglob(f"{shas[1]}.json")]
    original = good.read_text()
    stored = json.loads(original)
    stored["checks"]["tests/test_net.py::test_other"] = stored["checks"][NODE]
    good.write_text(json.dumps(stored))
    git(path, "checkout", "-q", shas[5])
    try:
        proc = run(path, "-m", "pytest_compilecache", "bisect", "--device", "cpu", shas[1],
                   shas[5], "--", NODE)
    finally:  # the later tests diff GOOD's manifest as it was
        stored = json.loads(good.read_text())
        del stored["checks"]["tests/test_net.py::test_other"]
        good.write_text(json.dumps(stored))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert f"first commit whose cache keys differ from {shas[1][:10]}: {shas[2]} \"tune inductor\"" in out
    assert "inductor_config[epilogue_fusion]: True -> False" in out
    assert "of 4 commits tested" in out
    assert f"  {shas[1][:10]}: read from " in out and "(1 check(s) the arguments select)" in out
    assert f"recording {shas[1][:10]}" not in out


def test_cli_show_and_diff_read_json_without_torch(repo):
    path, shas = repo["path"], repo["shas"]
    stored = {k: f for f in (path / ".compilecache" / "manifests").rglob("*.json")
              for k in [f.stem]}
    proc = run(path, "-X", "importtime", "-m", "pytest_compilecache", "diff",
               str(stored[shas[1]]), str(stored[shas[2]]))
    assert proc.returncode == 1, proc.stdout + proc.stderr[-2000:]
    assert "drifted   tests/test_net.py::test_net" in proc.stdout
    assert "inductor_config[epilogue_fusion]: True -> False" in proc.stdout
    assert not [line for line in proc.stderr.splitlines() if line.rstrip().endswith("| torch")]
    same = run(path, "-m", "pytest_compilecache", "diff", str(stored[shas[0]]), str(stored[shas[1]]))
    assert same.returncode == 0 and "unchanged" in same.stdout
    shown = run(path, "-m", "pytest_compilecache", "show", str(stored[shas[2]]))
    assert shown.returncode == 0 and "fx_graph:0/0" in shown.stdout and NODE in shown.stdout


def test_a_wrong_baseline_is_a_usage_error_that_says_what_to_fix(repo):
    path = repo["path"]
    proc = run(path, "-m", "pytest", "-p", "no:cacheprovider", "--compile-cache-check",
               "--compile-cache-baseline=no-such-branch")
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "--compile-cache-baseline=no-such-branch: 'no-such-branch' is not a commit" in proc.stderr
    assert "fetch it first in a shallow clone" in proc.stderr


def test_a_baseline_missing_from_a_shallow_clone_is_a_usage_error(repo, tmp_path):
    git(repo["path"], "checkout", "-q", repo["shas"][5])
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{repo['path']}", str(shallow)],
                   check=True)
    proc = run(shallow, "-m", "pytest", "-p", "no:cacheprovider", "--compile-cache-check",
               "--compile-cache-baseline=HEAD~1")
    err = proc.stdout + proc.stderr
    assert proc.returncode == 4, err[-2000:]
    assert "INTERNALERROR" not in err
    assert "--compile-cache-baseline=HEAD~1: 'HEAD~1' is not in this shallow clone" in err
    assert "git fetch --unshallow" in err
