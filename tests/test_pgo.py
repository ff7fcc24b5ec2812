"""PGO as production gets it: the children inherit the user's job id (or its absence).
A model called with varying batch sizes recompiles static -> dynamic on every restart
without a job id (pytorch PR 139001), although every FX and AOTAutograd lookup hits."""
from __future__ import annotations

from typing import Dict

import pytest

from conftest import RepoRun, run_repo

pytestmark = pytest.mark.slow

TESTS = '''
import pytest
import torch

from models import MLP


@pytest.mark.compile_cache
def test_varying_batch(compile_cache):
    model = MLP().to(compile_cache.device).eval()
    serve = torch.compile(model)
    with torch.no_grad():
        for n in (4, 7, 9):
            serve(torch.randn(n, 16, device=compile_cache.device))


@pytest.mark.compile_cache
@pytest.mark.compile_cache_accept("dynamo_pgo", reason="no PGO job id in production")
def test_varying_batch_accepted(compile_cache):
    test_varying_batch(compile_cache)  # the same serving loop, its known cost accepted


def make_layer():  # as einops builds its layers: a function closing over another
    def act(t):
        return torch.relu(t) + 1

    def layer(x):
        return act(x) * 2

    return layer


@pytest.mark.compile_cache
def test_varying_batch_in_a_closure(compile_cache):
    serve = torch.compile(make_layer())
    for n in (4, 7, 9):
        serve(torch.randn(n, 16, device=compile_cache.device))
'''


PLAIN = ("-k", "test_varying_batch and not closure and not accepted")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, RepoRun]:
    files = {"test_serve.py": TESTS}
    return {
        # the closure's advice (a job id would not help) is judged on its record, made by
        # this module's TESTS (tests/test_judges.py: pgo_closure_no_job_id), CI time
        "none": run_repo(tmp_path_factory.mktemp("pgo_none"), files, "--junitxml=junit.xml",
                         "-k", "not closure"),
        # a job id is asserted on the plain check only (the closure's is the record's);
        # the plugin's own (--compile-cache-job-id=per-check) on test_launcher.py's session
        "env": run_repo(tmp_path_factory.mktemp("pgo_env"), files, *PLAIN,
                        env={"TORCH_COMPILE_JOB_ID": "scorer-v1"}),
    }


def test_without_a_job_id_the_restart_recompiles_and_the_check_fails(runs) -> None:
    run = runs["none"]
    c = run.check("test_varying_batch")
    assert c["verdict"] == "fail", run.out[-3000:]
    pgo = c["layers"]["dynamo_pgo"]
    assert pgo["state"] == "miss"
    assert "no job id" in pgo["reasons"][0] and "frame 0 compiled 2 times" in pgo["reasons"][0]
    assert "size mismatch" in pgo["reasons"][0]
    assert "TORCH_COMPILE_JOB_ID=<id>" in pgo["reasons"][0]
    for layer in ("aot_autograd", "fx_graph"):  # every cache lookup hit all the same
        assert c["layers"][layer]["state"] == "hit", c["layers"][layer]
    assert c["job_id"]["cold"] == {"value": None, "source": "none"}
    assert "PGO job id: none (not in the environment, not set in code)" in run.out


def test_a_check_that_accepts_the_pgo_recompile_passes_and_says_accepted(runs) -> None:
    """Issue 38: a maintainer who runs no PGO in production accepts the named cost for
    one check; every output shows it as `accepted` with its reasons, and its twin without
    the marker still fails in the same session."""
    run = runs["none"]
    c = run.check("test_varying_batch_accepted")
    assert c["verdict"] == "pass", run.out[-3000:]
    pgo = c["layers"]["dynamo_pgo"]
    assert pgo["state"] == "accepted" and c["problems"] == []
    assert pgo["accepted"] == ("@pytest.mark.compile_cache_accept at test_serve.py:17 "
                               "(no PGO job id in production)")
    assert pgo["reasons"][0].startswith("miss, accepted by @pytest.mark.compile_cache_accept")
    assert "frame 0 compiled 2 times" in pgo["reasons"][1]
    assert run.check("test_varying_batch")["verdict"] == "fail"
    row = next(line for line in run.out.splitlines()
               if line.startswith("test_serve.py::test_varying_batch_accepted"))
    assert row.split()[1:3] == ["pass", "accepted"], row
    assert "accepted: test_serve.py::test_varying_batch_accepted: dynamo_pgo (@pytest.mark." \
           "compile_cache_accept at test_serve.py:17 (no PGO job id in production)): no job " \
           "id, so no PGO state" in run.out
    assert run.path is not None
    junit = (run.path / "junit.xml").read_text()
    assert 'name="compile_cache.dynamo_pgo" value="accepted"' in junit


def test_a_job_id_from_the_environment_is_inherited_and_the_check_passes(runs) -> None:
    run = runs["env"]
    c = run.check("test_varying_batch")
    assert c["verdict"] == "pass", run.out[-3000:]
    pgo = c["layers"]["dynamo_pgo"]
    assert pgo["state"] == "hit" and pgo["cold"] == "written 2"
    assert c["job_id"]["warm"] == {"value": "scorer-v1",
                                   "source": "environment (TORCH_COMPILE_JOB_ID)"}
