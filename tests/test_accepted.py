"""Accepted warm-start costs (issue 38): the rule on real recorded phase records, and the
option's and marker's usage errors. The real session (a marker accepting the PGO
recompile of a varying batch without a job id) is tests/test_pgo.py's."""
from __future__ import annotations

import pytest

from pytest_compilecache.judge import accepted
from pytest_compilecache.render import lines as tx, markdown
from test_judges import load, rejudge


def _accept(case: str, *names: str, marker: bool = False):
    res = rejudge(load(case))
    acc = accepted.acceptance((), names, "test_serve.py:17", "no PGO in production") \
        if marker else accepted.acceptance(names)
    accepted.apply(res, acc)
    return res


def test_the_session_accepts_the_pgo_recompile_and_the_check_passes_with_its_reasons() -> None:
    before = rejudge(load("pgo_no_job_id"))
    assert before.verdict == "fail" and before.problems[0].startswith("dynamo_pgo: miss")
    res = _accept("pgo_no_job_id", "dynamo_pgo")
    pgo = res.layers["dynamo_pgo"]
    assert res.verdict == "pass" and res.problems == []
    assert pgo.state == "accepted" and pgo.accepted == "--compile-cache-accept"
    assert pgo.reasons[0] == "miss, accepted by --compile-cache-accept"
    assert pgo.reasons[1] == before.layers["dynamo_pgo"].reasons[0]  # the cost stays named
    # every output shows it: the terminal's table and lines, the job summary's cell
    res.location = {"file": "pgo/test_serve.py", "line": 17}
    lines = tx.summary_lines([res.summary_row()])
    assert lines[1].split()[1:3] == ["pass", "accepted"], lines
    assert any(line.startswith("accepted: pgo/test_serve.py::test_varying_batch: dynamo_pgo "
                               "(--compile-cache-accept): no job id") for line in lines), lines
    folded = tx.summary_lines([res.summary_row()], quiet=True)
    assert "... of which 1 passed with an accepted warm-start cost (listed without -q)" in folded
    assert "☑️ accepted" in "\n".join(markdown.table([res]))


def test_a_marker_names_its_place_and_reason() -> None:
    res = _accept("pgo_no_job_id", "dynamo_pgo", marker=True)
    assert res.verdict == "pass"
    assert res.layers["dynamo_pgo"].accepted == ("@pytest.mark.compile_cache_accept at "
                                                 "test_serve.py:17 (no PGO in production)")


def test_accepting_one_layer_leaves_every_other_problem_failing() -> None:
    """A stale entry's outputs and its kernels' miss still fail when PGO is accepted;
    accepting the kernels' miss too leaves the outputs failing."""
    res = _accept("stale_entry", "dynamo_pgo", "kernels")
    assert res.verdict == "fail"
    assert res.layers["kernels"].state == "accepted"
    assert res.problems and all(p.startswith("outputs") for p in res.problems), res.problems


def test_a_hit_or_a_switch_set_in_code_is_not_accepted() -> None:
    res = _accept("pass_mlp", "fx_graph", marker=True)
    assert res.layers["fx_graph"].state == "hit" and res.verdict == "pass"
    assert any("fx_graph: accepted by @pytest.mark.compile_cache_accept" in n
               and "it hit: the acceptance can go" in n for n in res.notes)
    session = _accept("pass_mlp", "fx_graph")  # the session's option says nothing per check
    assert not any("acceptance can go" in n for n in session.notes)
    off = rejudge(load("pgo_no_job_id"))
    off.layers["dynamo_pgo"].state = "off"
    accepted.apply(off, accepted.acceptance(("dynamo_pgo",)))
    assert off.layers["dynamo_pgo"].state == "off"


@pytest.mark.parametrize("args, message", [
    (("--compile-cache-accept=pgo",), "*'pgo': not a cache layer (the layers are dynamo_pgo, "
                                      "aot_autograd, fx_graph, kernels, autotune)*"),
])
def test_an_unknown_layer_is_a_usage_error(pytester: pytest.Pytester, args, message) -> None:
    result = pytester.runpytest_subprocess("--compile-cache-check", *args)
    result.stderr.fnmatch_lines([message])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_a_marker_without_layers_or_with_extra_arguments_is_a_problem() -> None:
    """An unknown layer in a session: the test below."""
    assert accepted.marker_problem((), {}, ("dynamo_pgo",)).startswith("name the layer(s)")
    assert accepted.marker_problem(("dynamo_pgo",), {"why": "x"}, ("dynamo_pgo",)) == \
        "why: it takes the layers and reason= only"


@pytest.mark.parametrize("checked", ["@pytest.mark.compile_cache", ""])
def test_a_bad_accept_marker_is_the_one_thing_said_whether_the_test_is_checked_or_not(
        pytester: pytest.Pytester, checked) -> None:
    """Issue 53 point 8: "no check ran ... no collected test carries the compile_cache
    marker" came before the usage error, and on a test without compile_cache (a
    module's pytestmark gives it one) the bad marker was ignored without a word."""
    pytester.makepyfile(test_m=f'''
        import pytest

        {checked}
        @pytest.mark.compile_cache_accept("fx_graphs")
        def test_m():
            pass
    ''')
    result = pytester.runpytest_subprocess("--compile-cache-check", "-p", "no:cacheprovider")
    result.stderr.fnmatch_lines(["*test_m.py::test_m: @pytest.mark.compile_cache_accept(...): "
                                 "'fx_graphs': not a cache layer*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "no check ran" not in result.stdout.str() + result.stderr.str()
