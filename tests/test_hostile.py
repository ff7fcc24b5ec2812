"""Honest under hostile environments (issue 30), with real sessions and real processes:
a test's code that moves the caches or clears the environment, a cache root swapped
for someone else's directory between phases, full disks (real tmpfs mounts where the
machine allows them), a cache write that failed. Each of these passed, crashed or lost
a check before its fix."""
from __future__ import annotations

import contextlib
import errno
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from conftest import RepoRun, run_repo

pytestmark = pytest.mark.slow

MODEL_CASES = '''
import os

import pytest
import torch

from models import Scaled
from pytest_compilecache import ModelCase

TEAM = os.path.join(os.path.dirname(__file__), "team-cache")


@pytest.fixture
def mlp():  # one addmm, no C++ kernel: the cheapest real compile; the caches' places are checked
    return ModelCase(torch.nn.Linear(16, 4), example_inputs=(torch.randn(4, 16),))


@pytest.mark.compile_cache
def test_team_cache_in_conftest(mlp):
    ...


@pytest.mark.compile_cache
def test_cache_moved_in_the_body(compile_cache):
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = TEAM
    model = torch.compile(Scaled())
    compile_cache.record("out", model(torch.randn(4, 16)))


@pytest.mark.compile_cache
def test_fx_write_failed(compile_cache):
    # a fault injected at the write (the disk was full for an instant during the cold
    # run): torch logs the error and goes on; the warm run then compiles again
    from torch._inductor.codecache import FxGraphCache

    if compile_cache.phase == "cold":
        def full(*args, **kwargs):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        FxGraphCache._write_to_local_cache = staticmethod(full)
    model = torch.compile(torch.nn.Linear(16, 4))
    compile_cache.record("out", model(torch.ones(2, 16)))


@pytest.mark.compile_cache
def test_root_swapped(mlp):
    ...
'''

CONFTEST = '''
import os
import shutil

# teams share a cache this way; and a conftest may change directory at import
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(os.path.dirname(__file__), "team-cache")
os.chdir(os.path.join(os.path.dirname(__file__), "elsewhere"))


def pytest_compilecache_between_phases(item, cache_root):
    if item.name != "test_root_swapped":
        return
    # another user who can write the root's parent puts their directory in its place
    theirs = cache_root.parent.parent / "theirs"
    shutil.copytree(cache_root, theirs, symlinks=True)
    shutil.rmtree(cache_root)
    os.symlink(theirs, cache_root)
'''


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> RepoRun:
    repo = tmp_path_factory.mktemp("hostile")
    (repo / "elsewhere").mkdir()
    return run_repo(repo, {"test_hostile.py": "import errno\n" + MODEL_CASES,
                           "conftest.py": CONFTEST},
                    "--compile-cache-root=roots", "--compile-cache-store=none")


def test_a_conftests_team_cache_does_not_warm_the_cold_run(hostile: RepoRun) -> None:
    c = hostile.check("test_team_cache_in_conftest")
    assert c["verdict"] == "pass", hostile.out[-3000:]
    assert c["layers"]["fx_graph"]["cold"].startswith("miss"), c["layers"]
    assert any("TORCHINDUCTOR_CACHE_DIR set to" in n and "team-cache" in n
               and "put its own back" in n for n in c["notes"]), c["notes"]


def test_a_cache_dir_moved_by_the_test_body_is_an_error_naming_it(hostile: RepoRun) -> None:
    c = hostile.check("test_cache_moved_in_the_body")
    assert c["verdict"] == "error", hostile.out[-3000:]
    assert c["error"].startswith("cold phase kept its caches outside the check's private root")
    assert "TORCHINDUCTOR_CACHE_DIR=" in c["error"] and "team-cache" in c["error"]
    assert "(set by the test's code)" in c["error"] and "os.environ.setdefault" in c["error"]


def test_a_cold_cache_write_that_failed_is_named_not_blamed_on_the_model(hostile: RepoRun) -> None:
    c = hostile.check("test_fx_write_failed")
    assert c["verdict"] == "error", hostile.out[-3000:]
    assert c["problems"][0].startswith("the cold phase could not save all of its caches"), \
        c["problems"]
    assert "No space left on device" in c["problems"][0]


def test_a_cache_root_swapped_for_a_symlink_is_refused(hostile: RepoRun) -> None:
    c = hostile.check("test_root_swapped")
    assert c["verdict"] == "error", hostile.out[-3000:]
    assert c["error"].startswith("warm phase was not run: its cache root ")
    assert "was replaced by a symlink to" in c["error"] and "theirs" in c["error"]
    theirs = Path(c["cache_root"]).parent.parent / "theirs"
    assert not (theirs / "phases" / "warm.log").exists()  # nothing ran from their directory


def test_a_relative_root_stays_where_pytest_was_started(hostile: RepoRun) -> None:
    kept = [Path(c["cache_root"]) for c in hostile.report["checks"] if c["cache_root"]]
    assert kept and all(p.parent.name == "roots" and p.parent.parent.name.startswith("hostile")
                        for p in kept), kept


CLEARS = '''
import os

import pytest
import torch

from pytest_compilecache import ModelCase

PATH = os.environ["PATH"]  # g++ needs it, in production as here
os.environ.clear()
os.environ["PATH"] = PATH


@pytest.mark.compile_cache
@pytest.mark.parametrize("n", [4])
def test_cleared(n):
    ...


@pytest.fixture
def model_case(n):
    return ModelCase(torch.nn.Linear(16, 4), example_inputs=(torch.randn(n, 16),))
'''


@pytest.fixture(scope="module")
def cleared(tmp_path_factory: pytest.TempPathFactory) -> RepoRun:
    """A module that clears the environment at import, checked under `-n 2` in a git
    repo with PYTHONDONTWRITEBYTECODE set: one session for both tests below (CI time)."""
    from conftest import MODELS, commit, git

    files = {"test_clears.py": CLEARS.replace("def test_cleared(n)",
                                              "def test_cleared(model_case)"),
             ".gitignore": ".compilecache/\nreport.json\n"}
    repo = tmp_path_factory.mktemp("cleared") / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    commit(repo, "first", {"models.py": MODELS, "pytest.ini": "[pytest]\n", **files})
    return run_repo(repo, files, "-n", "2", env={"PYTHONDONTWRITEBYTECODE": "1"})


def test_a_cleared_environment_loses_no_check_under_xdist(cleared: RepoRun) -> None:
    run = cleared
    # one check on one of two workers: the worker's ledger survives the cleared
    # environment (the model is the smallest: the subject is the session, CI time)
    assert run.report is not None and len(run.report["checks"]) == 1, run.out[-3000:]
    for c in run.report["checks"]:
        assert c["verdict"] == "pass", run.out[-3000:]
        assert any("(the environment was cleared?)" in n and "TORCHINDUCTOR_CACHE_DIR removed"
                   in n for n in c["notes"]), c["notes"]


# -- full disks ---------------------------------------------------------------------
@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs",
                           str(path)], capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"needs a tmpfs mount (root on a machine that allows it): {done.stderr}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


FILL = '''
import os


def pytest_compilecache_between_phases(item, cache_root):
    # the disk of the store and the report fills up while the checks run
    with open(os.path.join(os.environ["FULL_DISK"], "filler"), "ab") as f:
        try:
            while True:
                f.write(b"x" * 65536)
                f.flush()
        except OSError:
            pass
'''

ONE_CHECK = '''
import pytest
import torch

from models import MLP
from pytest_compilecache import ModelCase


@pytest.fixture
def mlp():
    return ModelCase(MLP(), example_inputs=(torch.randn(4, 16),))


@pytest.mark.compile_cache
def test_mlp(mlp):
    ...
'''


# where the disk filled by FILL is what is checked, not a layer: one addmm, no generated
# C++ kernel, the cheapest real compile (the full cache root needs ONE_CHECK's kernels)
ONE_LINEAR = ONE_CHECK.replace("from models import MLP\n", "").replace(
    "ModelCase(MLP(), ", "ModelCase(torch.nn.Linear(16, 4), ")
assert "MLP" not in ONE_LINEAR.replace("def mlp", "")


def test_a_full_store_and_report_disk_are_named_and_the_verdicts_kept(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", "4m") as disk:
        run = run_repo(tmp_path / "repo", {"test_one.py": ONE_LINEAR, "conftest.py": FILL},
                       f"--compile-cache-store={disk / 'store'}", env={"FULL_DISK": str(disk)})
    c = run.check("test_mlp")
    assert c["verdict"] == "error", run.out[-3000:]
    assert c["problems"][0].startswith(f"could not write the key manifest to {disk / 'store'}: "
                                       f"No space left on device (errno {errno.ENOSPC}); the "
                                       f"disk is full"), c["problems"]
    assert "(the check itself: pass)" in c["problems"][0]
    assert "Traceback" not in run.out and "failed in the controller" not in run.out


def test_a_full_report_disk_keeps_the_summary_and_names_the_path(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", "2m") as disk:
        run = run_repo(tmp_path / "repo", {"test_one.py": ONE_LINEAR, "conftest.py": FILL},
                       "--compile-cache-store=none", f"--compile-cache-report={disk}/r.json",
                       env={"FULL_DISK": str(disk)})
    assert run.ret == 1, run.out[-3000:]  # the check passed; a job must not go green without
    assert "the exit status is 1 although the checks passed" in run.out  # its report
    assert "compile-cache summary" in run.out and "pass" in run.out
    assert (f"report NOT written: could not write the JSON report to {disk}/r.json: No space "
            f"left on device") in run.out, run.out[-3000:]
    assert "Traceback" not in run.out


def test_a_full_cache_root_is_named_as_the_disk(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", "1200k") as disk:
        run = run_repo(tmp_path / "repo", {"test_one.py": ONE_CHECK},
                       f"--compile-cache-root={disk}", "--compile-cache-store=none")
    c = run.check("test_mlp")
    assert c["verdict"] == "error", run.out[-3000:]
    assert c["error"].startswith(f"cold phase ran out of disk space: the filesystem of its "
                                 f"cache root {disk}/compilecache-test-mlp-"), c["error"][:500]
    assert "an environment problem, not the model nor the plugin" in c["error"]



def test_a_cleared_environment_under_xdist_leaves_no_bytecode_in_the_repository(
        cleared: RepoRun) -> None:
    """Issue 53 point 8: with PYTHONDONTWRITEBYTECODE set, a test module that clears the
    environment at import made the phases write `__pycache__` into the work tree under
    `-n 2`: this very session's key manifest went to `<sha>-dirty.json`."""
    from conftest import git

    run, repo = cleared, cleared.path
    assert run.report is not None and run.report["checks"][0]["verdict"] == "pass", \
        run.out[-3000:]
    untracked = git(repo, "status", "--porcelain", "--untracked-files=all")
    assert untracked == "", untracked
    assert not list(repo.rglob("__pycache__"))
    [manifest] = repo.glob(".compilecache/manifests/*/*.json")
    assert not manifest.name.endswith("-dirty.json")
