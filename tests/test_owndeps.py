"""The plugin's own dependencies are never preloaded as the tests' libraries, nor counted
as environment reads that make a phase start fresh (issue 29: kornia's conftest set
HF_HOME, GitPython, imported by the plugin, had copied the whole environment in the
preloaded interpreter, and every phase ran fresh)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from conftest import commit, git, run_repo
from pytest_compilecache import owndeps
from pytest_compilecache.launch.envspy import EnvSpy


def test_the_plugins_own_dependencies_come_from_its_distributions_metadata() -> None:
    """gitpython and what it needs, transitively; not torch, pytest or what they need
    (filelock is torch's too: the tests have it without the plugin)."""
    own = owndeps.plugin_only_modules()
    assert {"pytest_compilecache", "git", "gitdb", "smmap"} <= own, own
    assert not own & {"torch", "pytest", "filelock", "sympy", "pluggy", "typing_extensions"}, own


def test_only_what_the_plugins_own_import_brought_in_is_left_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dependency the plugin's import brought in is the plugin's; one imported before
    it (a conftest's import) stays the tests'."""
    (tmp_path / "ownlib.py").write_text("import ownlib_helper\n")
    (tmp_path / "ownlib_helper.py").write_text("")
    (tmp_path / "theirlib.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(owndeps, "_brought", set())
    monkeypatch.setattr(owndeps, "plugin_only_modules",
                        lambda: frozenset({"ownlib", "ownlib_helper", "theirlib"}))
    for name in ("ownlib", "ownlib_helper", "theirlib"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import theirlib  # noqa: F401  the tests imported it first

    owndeps.import_own("ownlib")
    owndeps.import_own("theirlib")
    assert owndeps._brought >= {"ownlib", "ownlib_helper"} and "theirlib" not in owndeps._brought
    assert owndeps.the_tests(["ownlib", "ownlib_helper.x", "theirlib", "fsspec",
                              "pytest_compilecache.plugin"]) == ["theirlib", "fsspec"]


def test_the_plugins_own_reads_at_import_are_not_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reads and copies made by an ignored module's code (the plugin's own, in the
    preloaded interpreter's base imports) are not recorded; another module's are, with
    its name."""
    (tmp_path / "ownreader.py").write_text(
        "import os\nos.environ.get('OWN_VAR')\nENV = dict(os.environ)\n")
    (tmp_path / "theirreader.py").write_text(
        "import os\nos.environ.get('THEIR_VAR')\nENV = os.environ.copy()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    spy = EnvSpy(dict(os.environ), frozenset({"ownreader"}))
    monkeypatch.setattr(os, "environ", spy)
    for name in ("ownreader", "theirreader"):
        monkeypatch.delitem(sys.modules, name, raising=False)
        __import__(name)
    monkeypatch.undo()
    assert set(spy.reads) == {"THEIR_VAR"}, spy.reads
    assert spy.copies == [{"where": f"{tmp_path.name}/theirreader.py:3",
                           "module": "theirreader"}], spy.copies


CONFTEST = '''
import os

os.environ["HF_HOME"] = os.path.join(os.path.dirname(__file__), "hf")
'''

TESTS = '''
import pytest
import torch

from pytest_compilecache import ModelCase


@pytest.fixture
def linear():
    return ModelCase(torch.nn.Linear(8, 4), example_inputs=(torch.randn(2, 8),))


@pytest.mark.compile_cache
def test_linear(linear):
    ...
'''


@pytest.mark.slow
def test_a_conftests_variable_leaves_phases_forked_though_the_plugin_imported_gitpython(
        tmp_path: Path) -> None:
    """kornia's shape: the suite's conftest sets HF_HOME while pytest collects (after
    the preloaded interpreters started: `suite/` is no initial conftest dir), and the
    plugin imports GitPython for the key manifest's commit (a git repository). GitPython
    copies the whole environment at import; it is the plugin's, so it is not preloaded,
    and both phases fork."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    files = {"suite/conftest.py": CONFTEST, "suite/test_linear.py": TESTS}
    sha = commit(repo, "the suite", files)
    run = run_repo(repo, files)
    c = run.check("test_linear")
    assert c["verdict"] == "pass", run.out[-3000:]
    assert run.report is not None and run.report["commit"]["sha"] == sha  # GitPython ran
    assert c["launch"] == {"cold": "forked", "warm": "forked"}, c["notes"]
    assert not [n for n in c["notes"] if "git" in n], c["notes"]
