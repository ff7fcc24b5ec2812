"""Intended key changes accepted in the repository (compilecache-accepted.json, written by
`pytest-compilecache accept REF`): the PR lane of docs/github-action.md by hand, real
sessions on CPU Inductor over one repository, in order:

  c0 main: two checks, its caches kept in the store ·
  c1 the PR: `fallback_random` flipped in one check's fixture; the other's first graph
     scaled by three, and its custom op's backward fixed (in no cache key: its second
     graph's cached backward is stale) ·
  c2 the acceptance, written by the one command and committed ·
  c3 a later change to the accepted check (`epilogue_fusion` flipped too), unaccepted
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

from conftest import NO_NUMPY, SCALED_SIN_OPS, commit, git

pytestmark = pytest.mark.slow

OPS = SCALED_SIN_OPS.replace("NS::", "ccaccept::")

MODEL = '''
import torch

from pkg.ops import scaled_sin

SCALE = 2.0


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(16, 16)

    def forward(self, x):
        return torch.relu(self.l1(x)) * 2.0


class Staged(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(16, 16)
        self.l2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        h = torch.relu(self.l1(x)) * SCALE
        torch._dynamo.graph_break()
        return self.l2(scaled_sin(h))
'''

TESTS = '''
import pytest
import torch

from pkg.model import Net, Staged
from pytest_compilecache import ModelCase


@pytest.fixture
def net():
    return ModelCase(Net(), example_inputs=(torch.randn(4, 16),))


@pytest.fixture
def staged():
    return ModelCase(Staged(), example_inputs=(torch.randn(4, 16),), train=True)


@pytest.mark.compile_cache
def test_flip(net):
    ...


@pytest.mark.compile_cache
def test_staged(staged):
    ...
'''

FLIP = "    return ModelCase(Net(), "
FILE = "compilecache-accepted.json"


def session(path: Path, *args: str) -> Dict[str, Any]:
    """`pytest --compile-cache-check ARGS` in the repository, as a user runs it."""
    report = path.parent / f"{path.name}-report.json"
    report.unlink(missing_ok=True)
    proc = _run(path, "-m", "pytest", "-p", "no:cacheprovider", "--compile-cache-check",
                f"--compile-cache-report={report}", *args)
    out = proc.stdout + proc.stderr
    assert report.exists(), out[-3000:]
    checks = {c["nodeid"].split("::")[-1]: c for c in json.loads(report.read_text())["checks"]}
    return {"ret": proc.returncode, "out": out, "checks": checks}


def _run(path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env["PYTHONPATH"] = str(path)  # the sitecustomize that blocks numpy
    return subprocess.run([sys.executable, *args], cwd=path, env=env, capture_output=True,
                          text=True, timeout=900)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    path = tmp_path_factory.mktemp("accept_repo")
    git(path, "init", "-q")
    shas: List[str] = [commit(path, "main", {
        "pytest.ini": "[pytest]\npythonpath = .\n", "pkg/__init__.py": "",
        "pkg/ops.py": OPS, "pkg/model.py": MODEL, "tests/test_net.py": TESTS,
        "sitecustomize.py": NO_NUMPY})]
    main = session(path, "--compile-cache-store-caches")
    assert main["ret"] == 0, main["out"][-3000:]
    shas.append(commit(path, "the PR", {
        "tests/test_net.py": TESTS.replace(FLIP, "    torch._inductor.config.fallback_random"
                                                 " = True\n" + FLIP),
        "pkg/model.py": MODEL.replace("SCALE = 2.0", "SCALE = 3.0"),
        "pkg/ops.py": OPS.replace("grad * torch.cos(x)", "grad * torch.cos(x) * 2.0")}))
    return {"path": path, "shas": shas}


@pytest.fixture(scope="module")
def accepted(repo) -> Dict[str, Any]:
    """The PR red in keys-only, then accepted with the one command it names."""
    path, base = repo["path"], repo["shas"][0]
    red = session(path, "--compile-cache-keys-only", f"--compile-cache-baseline={base}")
    accept = _run(path, "-m", "pytest_compilecache", "accept", base)
    assert accept.returncode == 0, accept.stdout + accept.stderr
    repo["shas"].append(commit(path, "accept the PR's key changes", {}))
    green = session(path, "--compile-cache-keys-only", f"--compile-cache-baseline={base}")
    deploy = session(path, f"--compile-cache-baseline={base}", "--compile-cache-baseline-warm")
    return {"red": red, "accept": accept.stdout, "green": green, "deploy": deploy,
            "file": json.loads((path / FILE).read_text())}


def test_keys_only_drift_names_the_one_command_that_accepts_it(repo, accepted):
    red, base = accepted["red"], repo["shas"][0]
    assert red["ret"] == 1, red["out"][-3000:]
    problems = " ".join(red["checks"]["test_flip"]["problems"])
    assert "inductor_config[fallback_random]" in problems, problems
    assert f"`pytest-compilecache accept {base}` (writes {FILE}" in problems, problems
    assert "--compile-cache-allow-drift" not in problems  # never a blanket `gm`
    said = "accepted  tests/test_net.py::test_flip: inductor_config[fallback_random]"
    assert said in accepted["accept"], accepted["accept"]
    entry = accepted["file"]["checks"]["tests/test_net.py::test_flip"]
    assert entry["components"] == ["inductor_config[fallback_random]"], entry
    assert all(g["old"] != g["new"] for g in entry["graphs"].values()), entry


def test_an_accepted_change_is_green_in_keys_only_and_in_the_deploy(accepted):
    green, deploy = accepted["green"], accepted["deploy"]
    flip = green["checks"]["test_flip"]
    assert flip["verdict"] == "recorded" and flip["drift"]["status"] == "accepted", flip
    assert green["ret"] == 0, green["out"][-3000:]
    c = deploy["checks"]["test_flip"]
    assert c["verdict"] == "pass", (c["problems"], deploy["out"][-3000:])
    assert c["layers"]["fx_graph"]["state"] == "accepted", c["layers"]
    assert any(n.startswith(f"the drift {FILE} accepts (inductor_config[fallback_random])"
                            f" explains the misses of") for n in c["notes"]), c["notes"]


def test_a_stale_entry_behind_an_accepted_change_still_fails_the_deploy(accepted):
    """The staged check's first graph changed (accepted), its second is served from
    main's cache with the old backward: the fresh compile of this commit still says so."""
    deploy = accepted["deploy"]
    c = deploy["checks"]["test_staged"]
    assert deploy["ret"] == 1 and c["verdict"] == "fail", deploy["out"][-3000:]
    assert c["layers"]["aot_autograd"]["state"] == "accepted", c["layers"]
    assert any("differs from a fresh compile of this commit's code" in p
               for p in c["problems"]), c["problems"]


def test_a_later_unaccepted_change_fails_and_the_stale_entry_is_said(repo, accepted):
    """Another flip on top of the accepted one: the entry accepts nothing now, so the
    drift fails and the entry is said stale. (The deploy's rule for such a miss, red and
    naming the command, is test_accepted_drift_file.py's, on recorded rows: a deploy
    session more costs ~80 s on a loaded 2-core machine.)"""
    path, base = repo["path"], repo["shas"][0]
    flipped = (path / "tests/test_net.py").read_text().replace(
        "fallback_random = True\n", "fallback_random = True\n    torch._inductor.config"
                                     ".epilogue_fusion = False\n")
    repo["shas"].append(commit(path, "another flip", {"tests/test_net.py": flipped}))
    keys = session(path, "--compile-cache-keys-only", f"--compile-cache-baseline={base}",
                   "-k", "test_flip")
    c = keys["checks"]["test_flip"]
    assert keys["ret"] == 1 and c["drift"]["status"] == "drifted", keys["out"][-3000:]
    assert any("inductor_config[epilogue_fusion]" in p and f"`pytest-compilecache accept "
               f"{base}`" in p for p in c["problems"]), c["problems"]
    assert (f"{FILE}: stale entry tests/test_net.py::test_flip: its check's drift is another "
            f"now") in keys["out"], keys["out"][-3000:]
    assert f"`pytest-compilecache accept {base} --prune`" in keys["out"]
