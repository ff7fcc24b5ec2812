"""Messages that say what the check knows (issue 50, point 4), fast: the judges on real
records with one thing changed, and the child's observers on live torch calls.

- a check whose runs compiled no Dynamo frame: says so, with torch's reason for the
  frames it skipped, never "caches disabled, a backend other than inductor";
- a check that compared no output (or only eager code): one line under the summary
  table, a passing check too, and no `equal (0 compared)` in its report;
- the probe run (eager again, other draws in the compiled calls) failing on the test's
  own assertion: named as that, with the file and line;
- PGO's closure hash: what torch really hashes (a code object's hash holds hash(None),
  None's address on Python <= 3.11, PYTHONHASHSEED or not), and torch's own wrapper
  frame is never the test's to move out of a closure;
- torch._dynamo.reset() called by torch._dynamo.explain, not by the test."""
from __future__ import annotations

import sys

import pytest
import torch

from pytest_compilecache.child.failures import probe_failed
from pytest_compilecache.child.frames import closure_hash_inputs
from pytest_compilecache.child.probe import CacheObserver
from pytest_compilecache.judge import recompiles
from pytest_compilecache.render.lines import failure_lines, summary_lines
from test_judges import load, rejudge

OLD_PYTHON = sys.version_info < (3, 12)


def _no_events(rec: dict) -> None:
    """A record's phases as if nothing had reached a cache layer."""
    for phase in ("cold", "warm"):
        rec["recs"][phase]["cache"]["graphs"] = {}
        rec["snaps"][phase] = {p: n for p, n in rec["snaps"][phase].items()
                               if p.endswith(".py")}


def test_a_check_whose_runs_compiled_no_frame_says_it_with_torchs_reason() -> None:
    rec = load("pass_mlp")
    _no_events(rec)
    skipped = ["_call_impl (frame is in the Dynamo skipfiles list: torch/nn/modules/module.py)"]
    for phase in ("cold", "warm"):
        rec["recs"][phase]["cache"]["counters"].pop("frames")
        rec["recs"][phase]["cache"]["dynamo"]["skipped"] = skipped
    res = rejudge(rec)
    assert res.verdict == "fail"
    assert res.problems == [
        "no cache events at all: the warm run hit no cache layer: Dynamo compiled 0 frames "
        "(cold: 0): torch skipped every frame the compiled calls ran: " + skipped[0]]
    report = "\n".join(failure_lines(res))
    assert "outputs: Dynamo compiled 0 frames in either run: the 1 tensor(s) compared came " \
           "from eager code" in report, report
    assert "equal (" not in report and "close" not in report, report


def test_a_passing_check_that_saw_no_output_says_so_under_the_table() -> None:
    rec = load("dynamo_reset")
    for phase in ("cold", "warm"):
        r = rec["recs"][phase]
        r["outputs"], r["compiled_calls"] = {}, 2
        for cmp in ("compare_cold", "compare_eager"):
            if r.get(cmp):
                r[cmp].update(compared=0, total=0)
    res = rejudge(rec)
    assert res.verdict == "pass", res.problems
    # the session's summary is written from each check's summary row (controller/spool.py)
    said = [x for x in summary_lines([res.summary_row()]) if ": outputs: " in x]
    assert said == [f"{res.label}: outputs: no output seen: its 2 compiled call(s) returned no "
                    f"tensor and the test recorded none: nothing was compared; record values "
                    f"with compile_cache.record(name, value)"], said
    assert "(0 compared)" not in "\n".join(failure_lines(res))
    folded = summary_lines([res.summary_row()], quiet=True)
    assert "... of which 1 compared no output (listed without -q)" in folded, folded


def test_the_probe_runs_failing_assertion_is_named_with_its_line() -> None:
    code = compile("def body():\n    assert 1 == 2, 'centroids moved'\n", "tests/test_km.py",
                   "exec")
    scope: dict = {}
    exec(code, scope)
    with pytest.raises(AssertionError) as info:
        scope["body"]()
    said = probe_failed(info.value, "tests/test_km.py")
    assert said.startswith("could not tell which tensors depend on random draws: the test's "
                           "own assertion failed at test_km.py:2 in the plugin's probe run"), said
    assert said.endswith("AssertionError: centroids moved; so no tensor was treated as random")


def test_a_closure_hash_is_told_by_what_torch_hashes() -> None:
    def act(x):
        return x

    def make(fn):
        def layer(x):
            return fn(x)
        return layer

    module = torch.nn.Linear(2, 2)
    assert closure_hash_inputs(make(act).__closure__) == (
        ["address", "strings"] if OLD_PYTHON else ["strings"])
    assert closure_hash_inputs(make(module).__closure__) == (["address"] if OLD_PYTHON else [])


def test_pgo_never_advises_moving_torchs_own_wrapper_out_of_a_closure() -> None:
    rec = load("pgo_closure_no_job_id")
    wrapper, user = "inner (external_utils.py:67)", "forward (test_einops.py:12)"
    for phase, h in (("cold", 1), ("warm", 2)):
        dyn = rec["recs"][phase]["cache"]["dynamo"]
        dyn["code_ids"] = {wrapper: h}
        dyn["user_code"] = {wrapper: user}
        dyn["hash_inputs"] = {wrapper: ["address"]}
    why = rejudge(rec).layers["dynamo_pgo"].reasons[0]
    assert f"torch's own wrapper {wrapper} around {user}" in why, why
    assert "None's memory address" in why and "PYTHONHASHSEED or not" in why, why
    assert "out of the closure" not in why and "fix PYTHONHASHSEED" not in why, why
    assert "mark_dynamic" in why


def test_pgo_names_the_hash_seed_where_only_strings_move_the_hash() -> None:
    rec = load("pgo_closure_no_job_id")
    for phase in ("cold", "warm"):
        rec["recs"][phase]["cache"]["dynamo"]["hash_inputs"] = {
            "layer (test_serve.py:21)": ["strings"]}
    why = rejudge(rec).layers["dynamo_pgo"].reasons[0]
    assert "unless PYTHONHASHSEED is fixed" in why and "fix PYTHONHASHSEED" in why, why
    assert "move layer (test_serve.py:21) out of the closure" in why, why


def test_resets_by_torch_dynamo_explain_are_not_the_tests() -> None:
    obs = CacheObserver()
    obs._count_resets()
    try:
        torch._dynamo.explain(lambda x: x + 1)(torch.ones(2))
        torch.compiler.reset()
    finally:
        for undo in obs._restore:
            undo()
    said = obs.frame_compiles()
    assert said["resets"] == 1, obs.resets  # torch.compiler.reset(), the test's own call
    assert said["reset_callers"] == {"torch._dynamo.explain": 2}, said["reset_callers"]
    s = {"resets": 0, "reset_callers": {"torch._dynamo.explain": 2},
         "codes": [{"frame": "0", "code": "f (t.py:3)", "compiles": 2, "recompiles": 1,
                    "guards": []}]}
    assert recompiles.lines({"cold": s, "warm": s}) == [
        "cold and warm: f (t.py:3) compiled 2 times: torch._dynamo.explain called "
        "torch._dynamo.reset() 2 time(s), which drops compiled code; not a guard failure"]

