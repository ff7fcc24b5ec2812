"""Issue 30, faults 5 and 8c: a stored manifest that is valid JSON of the wrong shape, or
truncated, is named with its repair wherever it is read (store, baseline, CLI, a drift
session), never a traceback, a silent re-record or a drift verdict; and a node id with
undecodable bytes (a lone surrogate) is printed escaped by every output path.

JSON files written directly and the CLI as a subprocess; one slow real drift session."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict

import pytest

from conftest import commit, git
from pytest_compilecache.history import manifest as mf
from pytest_compilecache.history.store import ManifestStore
from pytest_compilecache.model import CheckResult

ENV = {"torch": "2.13.0", "triton": None, "cuda": None, "python": "3.11.7", "device": "cpu",
       "device_name": None}
NODE = "t.py::test_a"
SHA = "a" * 40


def graph(key: str = "f1", **extra: Any) -> Dict[str, Any]:
    return {"layer": "fx_graph", "compile_id": "0/0", "backward": False, "key": key,
            "state": "miss", "components": [["gm", "h1", "a\\nb = x * 2.0"]], **extra}


def manifest(checks: Any = None, **top: Any) -> Dict[str, Any]:
    data = mf.new_manifest({"sha": SHA, "short": SHA[:10], "dirty": False}, ENV)
    data["checks"] = {NODE: {"verdict": "pass", "graphs": {"fx_graph:0/0": graph()}}} \
        if checks is None else checks
    data.update(top)
    return data


def entry_with(**g: Any) -> Dict[str, Any]:
    return {NODE: {"verdict": "pass", "graphs": {"fx_graph:0/0": graph(**g)}}}


# (the stored text, the JSON path the problem names)
WRONG_SHAPES = {
    "entry is a string": (manifest({NODE: "oops"}), 'checks["t.py::test_a"]: not an object'),
    "checks is a list": (manifest([]), "checks: not an object of node ids"),
    "graphs is a list": (manifest({NODE: {"graphs": [1]}}), 'checks["t.py::test_a"].graphs: '),
    "graph is a string": (manifest({NODE: {"graphs": {"fx_graph:0/0": "k"}}}),
                          'checks["t.py::test_a"].graphs["fx_graph:0/0"]: not an object'),
    "key is a number": (manifest(entry_with(key=5)),
                        'checks["t.py::test_a"].graphs["fx_graph:0/0"].key: not a string'),
    "components not a list": (manifest(entry_with(components="gm")),
                              '.graphs["fx_graph:0/0"].components: not a list'),
    "component too short": (manifest(entry_with(components=[["gm", "h1"]])),
                            '.graphs["fx_graph:0/0"].components[0]: not [name, hash, value]'),
    "commit is a string": (manifest(commit="abc"), "commit: not an object"),
    "digest not hex": (manifest(entry_with(components_digest="sha256:1")),
                       '.graphs["fx_graph:0/0"].components_digest: not a sha256 hex digest'),
    "count negative": (manifest(entry_with(components_count=-1)),
                       '.graphs["fx_graph:0/0"].components_count: not a count'),
}


def test_the_validator_names_the_json_path_of_the_first_wrong_thing() -> None:
    """One validator, every level compare and show read: the problem says where."""
    assert mf.problem(manifest()) is None
    assert mf.problem(manifest({NODE: {"verdict": "pass", "graphs": {}}})) is None
    for name, (data, where) in WRONG_SHAPES.items():
        why = mf.problem(data)
        assert why is not None and where in why, (name, why)
    assert mf.problem([manifest()]) == "not a pytest-compilecache key manifest"


def store_with(root: Path, text: Any) -> Path:
    path = ManifestStore(root).path(mf.environment_id(ENV), SHA)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text if isinstance(text, str) else json.dumps(text))
    return path


DAMAGED = {**{k: v[0] for k, v in WRONG_SHAPES.items()},
           "truncated": '{"schema": "pytest-compilecache/manifest", "checks": ',
           "top-level list": [manifest()],
           "undecodable bytes": b'{"schema": "\xff\xfe"}'}


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_reading_a_damaged_stored_manifest_names_the_file_and_the_repair(tmp_path, name) -> None:
    path = store_with(tmp_path, DAMAGED[name])
    store = ManifestStore(tmp_path)
    with pytest.raises(mf.BadManifest) as raised:
        store.read(mf.environment_id(ENV), SHA)
    said = str(raised.value)
    assert f"the key manifest {path} is unusable: " in said and f"delete {path} and re-record" in said
    assert "\n" not in said
    assert store.load(mf.environment_id(ENV), SHA) is None  # the lenient reader: as none
    assert ManifestStore(tmp_path / "empty").read(mf.environment_id(ENV), SHA) is None


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_merge_replaces_a_damaged_manifest_and_names_it(tmp_path, name) -> None:
    """A wrong-shape entry merged into would stay and break every later reader."""
    path = store_with(tmp_path, DAMAGED[name])
    store = ManifestStore(tmp_path)
    store.merge({"sha": SHA, "dirty": False}, ENV, {"t.py::test_b": {"graphs": {}}})
    assert store.replaced_damaged == [str(path)] and store.damage[str(path)]
    assert mf.problem(json.loads(path.read_text())) is None
    assert set(json.loads(path.read_text())["checks"]) == {"t.py::test_b"}


def test_a_newer_schema_is_an_upgrade_not_a_deletion(tmp_path) -> None:
    store_with(tmp_path, manifest(schema_version=mf.SCHEMA_VERSION + 1))
    with pytest.raises(mf.BadManifest) as raised:
        ManifestStore(tmp_path).read(mf.environment_id(ENV), SHA)
    assert "upgrade pytest-compilecache" in str(raised.value)
    assert "delete" not in str(raised.value)


class _Lines:
    """pytest's terminal reporter as write_summary uses it: the lines it was given."""

    def __init__(self) -> None:
        self.lines: list = []

    def write_sep(self, sep: str, title: str, **markup: Any) -> None:
        self.lines.append(title)

    def write_line(self, line: str, **markup: Any) -> None:
        self.lines.append(line)


@pytest.mark.parametrize("dirty", [False, True])
def test_an_older_reader_keeps_a_newer_manifest_and_writes_beside_it(tmp_path, dirty) -> None:
    """Issue 53 point 2: merged into, a newer file lost the check only the newer version
    recorded and its new field; it is kept byte for byte, this version's keys go beside
    it, and the summary says so (a line, under -q too: a stderr print inside the test
    call was swallowed by pytest's capture)."""
    from pytest_compilecache.render import terminal

    newer = manifest({"t.py::test_new": {"verdict": "pass", "graphs": {}, "new_field": 1}},
                     schema_version=mf.SCHEMA_VERSION + 1, new_top=[1])
    store = ManifestStore(tmp_path)
    path = store.path(mf.environment_id(ENV), SHA, dirty)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(newer))
    before = path.read_bytes()
    written = store.merge({"sha": SHA, "dirty": dirty}, ENV, entry_with())
    assert path.read_bytes() == before and written != path
    assert written.name == f"{SHA}.v{mf.SCHEMA_VERSION}{'-dirty' if dirty else ''}.json"
    assert set(json.loads(written.read_text())["checks"]) == {NODE}
    assert store.replaced_damaged == [] and store.kept_newer == {str(written): str(path)}
    store.merge({"sha": SHA, "dirty": dirty}, ENV, {"t.py::test_b": {"graphs": {}}})
    assert set(json.loads(written.read_text())["checks"]) == {NODE, "t.py::test_b"}
    assert path.read_bytes() == before
    # the trend reads this version's file of a clean commit, never a dirty one
    assert len(store.recent(mf.environment_id(ENV), 5)) == (0 if dirty else 1)
    tr = _Lines()
    terminal.write_summary(tr, [CheckResult(nodeid=NODE, verdict="pass")], verbosity=-1,
                           no_checks=None, gone=[], manifests=[str(written)], root=None,
                           report=None, report_problem=None, report_said=[])
    assert f"key manifest: {written}" in tr.lines
    assert f"  note: {path} was written by a newer pytest-compilecache; it is kept as it " \
        f"was, and this session's keys went beside it" in tr.lines


def test_the_baseline_comparison_becomes_a_problem_naming_the_file(tmp_path) -> None:
    """What the session does with Baseline.manifest (session._compare_with_baseline):
    its exception's text is the check's problem; before, a wrong-shape entry was
    handed to compare_check and raised AttributeError outside that guard."""
    from pytest_compilecache.history.baseline import Baseline

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    sha = commit(repo, "first", {"t.py": "def test_a():\n    pass\n"})
    store = ManifestStore(repo / ".compilecache")
    path = store.path(mf.environment_id(ENV), sha)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(manifest({NODE: "oops"}, commit={"sha": sha})))
    base = Baseline(repo, "HEAD", store, [], Path("."), Path("."), timeout=None)
    head = {"verdict": "pass", "graphs": {"fx_graph:0/0": graph()}}
    problems = []
    try:
        found = base.manifest(ENV, [NODE])
    except Exception as e:  # as the session's guard
        problems.append(f"baseline HEAD: {e}")
    else:
        mf.compare_check((found or {}).get("checks", {}).get(NODE), head)
    finally:
        base.close()
    (said,) = problems
    assert f"baseline HEAD: the key manifest {path} is unusable: checks[\"{NODE}\"]" in said
    assert f"delete {path} and re-record it" in said


# -- the CLI -------------------------------------------------------------------------------
def cli(*args: str, cwd: Any = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}  # strict, as a UTF-8 terminal's
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run([sys.executable, "-m", "pytest_compilecache", *args], cwd=cwd,
                          capture_output=True, timeout=120, env=env)


def text(stream: bytes) -> str:
    return stream.decode("utf-8")  # strict: the output is valid UTF-8


@pytest.mark.parametrize("name", sorted(set(WRONG_SHAPES) | {"truncated"}))
def test_cli_on_a_damaged_stored_manifest_exits_2_naming_file_and_repair(tmp_path, name, capsys):
    """Never 1 (that means the keys differ) and never an exception. In process: fast."""
    from pytest_compilecache.cli import main

    bad = store_with(tmp_path / "store", DAMAGED[name])
    good = tmp_path / "good.json"
    good.write_text(json.dumps(manifest()))
    for args in (["diff", str(good), str(bad)], ["diff", str(bad), str(good)], ["show", str(bad)],
                 ["merge", str(bad), "-o", str(tmp_path / "m.json")]):
        rc = main(args)
        out, err = capsys.readouterr()
        assert rc == 2, (args, out, err)
        assert len(err.strip().splitlines()) == 1, err
        assert str(bad) in err and f"delete {bad} and re-record it" in err, err
    assert main(["diff", str(good), str(good)]) == 0


def test_cli_diff_of_a_wrong_shape_manifest_exits_2_without_a_traceback(tmp_path) -> None:
    """The reported case end to end: `diff` exited 1 (keys differ) with an AttributeError."""
    bad = store_with(tmp_path / "store", manifest({NODE: "oops"}))
    good = tmp_path / "good.json"
    good.write_text(json.dumps(manifest()))
    proc = cli("diff", str(good), str(bad))
    err = text(proc.stderr)
    assert proc.returncode == 2 and "Traceback" not in err, err
    assert err.startswith(f"pytest-compilecache diff: the key manifest {bad} is unusable: "
                          f'checks["{NODE}"]: not an object but "oops"; delete {bad}'), err


def test_cli_diff_of_a_report_with_malformed_graph_rows_exits_2(tmp_path) -> None:
    rep = {"schema": "pytest-compilecache/report", "schema_version": 2,
           "created": "2026-11-23T00:00:00+00:00",
           "checks": [{"nodeid": NODE, "verdict": "pass",
                       "graphs": [{"phase": "cold", "layer": "fx_graph", "compile_id": "0/0",
                                   "key": "f", "components": "gm"}]}]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(rep))
    proc = cli("diff", str(path), str(path))
    err = text(proc.stderr)
    assert proc.returncode == 2 and "Traceback" not in err, err
    assert f"{path}: its cold keys are malformed: " in err and ".components: not a list" in err


def test_bisect_on_a_damaged_stored_manifest_exits_2_naming_it(tmp_path, monkeypatch, capsys):
    """In process, the environment stood in for (no torch import): bisect reads GOOD's
    stored manifest first, and a damaged one ends it before any recording."""
    from pytest_compilecache import cli as cli_module
    from pytest_compilecache.child import workload

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    good = commit(repo, "first", {"t.py": "def test_a():\n    pass\n"})
    commit(repo, "second", {"README": "x\n"})
    path = ManifestStore(repo / ".compilecache").path(mf.environment_id(ENV), good)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(manifest({NODE: "oops"}, commit={"sha": good})))
    monkeypatch.setattr(workload, "environment_of_python", lambda device: ENV)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # its log dir, if one is left
    monkeypatch.chdir(repo)
    rc = cli_module.main(["bisect", "--device", "cpu", "HEAD~1", "HEAD", "--", NODE])
    out, err = capsys.readouterr()
    assert rc == 2, out + err
    assert f"the key manifest {path} is unusable" in err and "recording" not in out
    assert not list(tmp_path.glob("compilecache-bisect-*"))  # nothing recorded, nothing left


# -- 8c: a node id with undecodable bytes ------------------------------------------------
SURROGATE_ID = "tests/test_\udcff.py::test_a"


def surrogate_report(tmp_path: Path) -> Path:
    """A real report's JSON as json.dump writes it: the lone surrogate as a \\udcff escape."""
    rep = {"schema": "pytest-compilecache/report", "schema_version": 2,
           "created": "2026-11-23T00:00:00+00:00", "summary": {"fail": 1, "pass": 1},
           "commit": {"sha": SHA, "short": SHA[:10], "dirty": False},
           "checks": [{"nodeid": SURROGATE_ID, "verdict": "fail",
                       "problems": ["outputs of test_\udcff differ"],
                       "graphs": [{"phase": "cold", "layer": "fx_graph", "compile_id": "0/0",
                                   "key": "f1", "state": "miss", "components": []}]},
                      {"nodeid": "tests/test_ok.py::test_b", "verdict": "pass"}]}
    path = tmp_path / "report.json"
    path.write_text(json.dumps(rep))
    assert "\\udcff" in path.read_text()
    return path


@pytest.mark.parametrize("args", [("show",), ("show", "--format", "markdown"),
                                  ("show", "--format", "github"), ("diff",)])
def test_every_output_path_writes_a_surrogate_node_id_escaped(tmp_path, args) -> None:
    path = str(surrogate_report(tmp_path))
    proc = cli(*args, path, *([path] if args == ("diff",) else []))
    out, err = text(proc.stdout), text(proc.stderr)
    assert proc.returncode == 0, out + err
    assert "Traceback" not in err and "tests/test_\\udcff.py" in out, out


def test_the_markdown_summary_of_a_surrogate_node_id_is_valid_utf8(tmp_path) -> None:
    from pytest_compilecache.render import markdown

    data = json.loads(surrogate_report(tmp_path).read_text())
    summary = markdown.render(data)
    assert "`tests/test_\\udcff.py::test_a`" in summary
    summary.encode("utf-8")  # strict


def test_the_actions_run_step_writes_summary_annotations_and_outputs(tmp_path) -> None:
    """The Action's run step; pytest is stood in for by a copy of the report (exit 1)."""
    rep = surrogate_report(tmp_path)
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "RUNNER_TEMP": str(tmp_path),
           "CC_REPORT_PATH": str(tmp_path / "out.json"), "CC_DEVICE": "cpu",
           "CC_OUT_DIR": str(tmp_path / "o"), "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
           "GITHUB_OUTPUT": str(tmp_path / "outputs.txt")}
    env.pop("PYTEST_ADDOPTS", None)
    code = ("import subprocess, sys; from pytest_compilecache import action; "
            f"subprocess.call = lambda argv: __import__('shutil').copy({str(rep)!r}, "
            f"{str(tmp_path / 'out.json')!r}) and 1; "
            "sys.exit(action.main(['run']))")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120)
    out = text(proc.stdout) + text(proc.stderr)
    assert proc.returncode == 0, out
    assert "tests/test_\\udcff.py" in out  # the annotation, printed
    assert "tests/test_\\udcff.py" in (tmp_path / "summary.md").read_text(encoding="utf-8")
    notes = (tmp_path / "o" / "compilecache-annotations.txt").read_text(encoding="utf-8")
    assert "tests/test_\\udcff.py" in notes
    assert "verdict=fail" in (tmp_path / "outputs.txt").read_text(encoding="utf-8")


# -- a real drift session ------------------------------------------------------------------
MODEL_TEST = '''
import pytest
import torch

from pytest_compilecache import ModelCase


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(16, 16)

    def forward(self, x):
        return torch.relu(self.l1(x))


@pytest.fixture
def net():
    return ModelCase(Net(), example_inputs=(torch.randn(4, 16),))


@pytest.mark.compile_cache
def test_net(net):
    ...
'''
SESSION_NODE = "tests/test_net.py::test_net"


@pytest.mark.slow
def test_a_drift_session_names_a_wrong_shape_baseline_and_a_truncated_head_manifest(tmp_path):
    """The baseline's stored manifest holds a string for the check: the check gets a
    problem naming the file and the repair (before: AttributeError, the verdict lost);
    this commit's own manifest is truncated: it is recorded anew, and the warning names it."""
    from pytest_compilecache.child.workload import environment_of_python

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    base = commit(repo, "first", {"pytest.ini": "[pytest]\npythonpath = .\n",
                                  "tests/test_net.py": MODEL_TEST})
    head = commit(repo, "document", {"README.md": "a model\n"})
    store = ManifestStore(repo / ".compilecache")
    env_id = mf.environment_id(environment_of_python("cpu"))
    bad, cut = store.path(env_id, base), store.path(env_id, head)
    bad.parent.mkdir(parents=True)
    bad.write_text(json.dumps(manifest({SESSION_NODE: "oops"}, commit={"sha": base})))
    cut.write_text('{"schema": "pytest-compilecache/manifest", "checks": {')
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           "--compile-cache-check", "--compile-cache-manifest-only",
                           f"--compile-cache-report={report}", f"--compile-cache-baseline={base}"],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert report.exists(), out[-3000:]
    (c,) = json.loads(report.read_text())["checks"]
    assert "AttributeError" not in out and c["verdict"] == "fail", (c, out[-3000:])
    assert any(p.startswith(f"baseline {base}: the key manifest {bad} is unusable: "
                            f"checks[\"{SESSION_NODE}\"]: not an object")
               and f"delete {bad} and re-record it" in p for p in c["problems"]), c["problems"]
    assert f"the stored key manifest {cut} was unreadable" in out, out[-3000:]
    assert mf.problem(json.loads(cut.read_text())) is None  # recorded anew
    assert json.loads(bad.read_text())["checks"][SESSION_NODE] == "oops"  # left for the user
