"""Which tests become checks: markers a conftest adds while collecting count, a session
that checks nothing says so (terminal, report, the Action's summary), and a marker's
arguments are torch.compile's keywords, checked at collection."""
from __future__ import annotations

import pytest

from conftest import run_repo

MARKED_IN_CONFTEST = {
    "conftest.py": '''
import pytest

def pytest_collection_modifyitems(config, items):  # as kornia's conftest marks its tests
    for item in items:
        if "dynamo" in item.name:
            item.add_marker(pytest.mark.compile_cache)
''',
    "test_ops.py": '''
import pytest
import torch

def test_dynamo():
    f = torch.compile(lambda x: torch.sin(x) * 2 + 1)
    torch.testing.assert_close(f(torch.ones(8)), torch.sin(torch.ones(8)) * 2 + 1)

def test_plain():
    assert 1 + 1 == 2


@pytest.mark.compile_cache(dynamic=False)
def test_body_with_arguments():
    f = torch.compile(lambda x: torch.cos(x) + 1)
    f(torch.ones(8))
''',
}


@pytest.mark.slow
def test_a_marker_a_conftest_adds_while_collecting_makes_a_check(tmp_path) -> None:
    run = run_repo(tmp_path, MARKED_IN_CONFTEST)
    assert run.ret == 0, run.out[-3000:]
    assert sorted(c["nodeid"] for c in run.report["checks"]) == [
        "test_ops.py::test_body_with_arguments", "test_ops.py::test_dynamo"]
    assert run.check("test_dynamo")["verdict"] == "pass"
    # a test body compiles itself: the marker's arguments cannot reach it, and it says so
    body = run.check("test_body_with_arguments")
    assert body["verdict"] == "pass"
    assert any("arguments (dynamic) were not used" in n for n in body["notes"]), body["notes"]
    assert run.report["no_checks"] is None
    assert "no check ran" not in run.out


def test_a_session_that_checks_nothing_says_so(tmp_path) -> None:
    from pytest_compilecache.render import gha
    from pytest_compilecache.render import markdown

    files = dict(MARKED_IN_CONFTEST, **{"conftest.py": ""})
    # no check runs: the preloaded launcher's two interpreters would import torch for nothing
    run = run_repo(tmp_path, files, "-k", "plain", "--compile-cache-launcher=fresh")
    assert run.ret == 0, run.out[-3000:]
    assert "compile-cache: no check ran" in run.out
    assert "selected no check: no collected test carries the compile_cache marker" in run.out
    assert run.report["checks"] == [] and "compile_cache marker" in run.report["no_checks"]
    assert sorted(p.name for p in tmp_path.glob(".*lock")) == []  # nothing beside the report
    assert "Nothing was checked. --compile-cache-check selected no check" in \
        markdown.render(run.report)
    assert any(line.startswith("::warning title=compile-cache::Nothing was checked")
               for line in gha.annotation_lines(run.report)), gha.annotation_lines(run.report)


@pytest.mark.parametrize("marker, says", [
    ("compile_cache(foo=1)", "foo: not a torch.compile keyword (it takes fullgraph, dynamic"),
    ("compile_cache(mode='bogus-mode')", "mode='bogus-mode': torch.compile's modes are"),
    ("compile_cache('reduce-overhead')", "positional argument(s) 'reduce-overhead': pass "
                                         "torch.compile's keywords by name, e.g. "
                                         "compile_cache(mode='reduce-overhead')"),
    ("compile_cache(mode='max-autotune', options={})", "mode and options together"),
])
def test_marker_arguments_are_checked_at_collection(pytester: pytest.Pytester, marker: str,
                                                     says: str) -> None:
    pytester.makepyfile(f"""
        import pytest

        @pytest.mark.{marker}
        def test_model():
            pass
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--compile-cache-check")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*test_marker_arguments_are_checked_at_collection.py::test_model:"
                                 f" @pytest.mark.compile_cache(...): {says}*"])
