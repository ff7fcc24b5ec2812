"""A third party adds a warm-start path through the `pytest_compilecache_warm_start_paths`
hook, with no edit of this package: a toy path in the model repo's conftest.py runs its
controller side (its phases' environment, its rule) and its child side (its compile) and
gets its own result row, report entry and job-summary column, and reads an option of
its own (`--compile-cache-toy-marks`, here from its ini twin). Real CPU compiles; the
option's help and the preflight that stops a session before anything compiles are
test_extension_points.py's (no compile)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_repo

pytestmark = pytest.mark.slow

CONFTEST = '''
import os
from pathlib import Path

from pytest_compilecache.pathoption import PathOption
from pytest_compilecache.paths.base import PhasePlan
from pytest_compilecache.paths.local import LocalRestart


class Toy(LocalRestart):
    """The local restart, each phase marked in its environment, its compile counted."""
    name = via = "toy"
    summary = "toy (the local restart, marked)"
    phases = (PhasePlan("cold", env=(("TOY_PHASE", "cold"),)),
              PhasePlan("warm", env=(("TOY_PHASE", "warm"),)))
    options = (PathOption("toy-marks", "directory the toy path marks its phases in", "DIR"),)

    def __init__(self, marks=None):
        self.marks = marks

    @classmethod
    def from_settings(cls, settings):
        return cls(settings.path_option("toy-marks"))

    def preflight(self):
        if not self.marks or not Path(self.marks).is_dir():
            return [f"--compile-cache-via=toy: --compile-cache-toy-marks={self.marks}: no "
                    f"such directory; make it first"]
        return []

    def phase_env(self, plan):
        return {**super().phase_env(plan), "TOY_MARKS": self.marks}

    def compile(self, phase, path, compile_fn, model, case, kwargs, inputs, ckw, info):
        # the child's side: runs in the phase process, which sees the controller's env
        marks = Path(os.environ["TOY_MARKS"])
        (marks / f"{phase}-{os.environ.get('TOY_PHASE')}").write_text(str(os.getpid()))
        return super().compile(phase, path, compile_fn, model, case, kwargs, inputs, ckw, info)

    def judge(self, nodeid, recs, snaps, timings, triton_dir):
        res = super().judge(nodeid, recs, snaps, timings, triton_dir)
        res.notes.append(f"toy: judged {sorted(recs)}")
        return res


def pytest_compilecache_warm_start_paths():
    return [Toy]
'''

TESTS = '''
import pytest
import torch

from pytest_compilecache import ModelCase


@pytest.fixture
def mlp():
    # one addmm, no generated C++ kernel: the cheapest real compile; what is checked here
    # is the session's wiring of a toy path, not a layer
    return ModelCase(torch.nn.Linear(16, 4), example_inputs=(torch.randn(4, 16),))


@pytest.mark.compile_cache
def test_mlp(mlp):
    ...
'''


def test_a_path_registered_through_the_hook_gets_its_own_row_entry_and_column(
        tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    run = run_repo(tmp_path / "repo", {"conftest.py": CONFTEST, "test_toy.py": TESTS,
                                       "pytest.ini": f"[pytest]\ncompile_cache_toy_marks = {marks}\n"},
                   "--compile-cache-via=local,toy")
    assert run.ret == 0, run.out[-3000:]
    # the child's side ran in each phase, under the controller side's environment
    assert sorted(p.name for p in marks.iterdir()) == ["cold-cold", "warm-warm"]
    # its own row in the terminal summary and its own entry in the report
    assert "test_toy.py::test_mlp [via toy] pass" in run.out, run.out[-3000:]
    toy = [c for c in run.report["checks"] if c["via"] == "toy"]
    assert len(toy) == 1 and toy[0]["verdict"] == "pass"
    assert "toy: judged ['cold', 'warm']" in toy[0]["notes"]
    assert toy[0]["layers"]["fx_graph"]["state"] == "hit"
    # its own column in the job summary
    md = subprocess.run([sys.executable, "-m", "pytest_compilecache", "show", "--format",
                         "markdown", str(tmp_path / "repo" / "report.json")],
                        capture_output=True, text=True, check=True).stdout
    assert "| check | local | toy |" in md, md


def test_a_path_the_hook_gets_wrong_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    bad = "class NotAPath:\n    name = 'x'\n\n\ndef pytest_compilecache_warm_start_paths():\n" \
          "    return [NotAPath]\n"
    run = run_repo(tmp_path / "repo", {"conftest.py": bad, "test_toy.py": TESTS})
    assert run.ret == pytest.ExitCode.USAGE_ERROR, run.out[-2000:]
    assert "returned conftest.NotAPath, which is not a subclass of " \
           "pytest_compilecache.paths.WarmStartPath" in run.out
