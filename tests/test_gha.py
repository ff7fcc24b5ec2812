"""The GitHub Action's renderings and steps, from recorded reports (no compile): the job
summary against expected Markdown, the byte budget, annotations and their escaping, the
outputs, the exit policy, a session that breaks before any report, and action.yml's
structure (every input through env:, every remote action pinned to a commit)."""
from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import List, Any, Dict

import pytest

from pytest_compilecache import action
from pytest_compilecache.render import gha
from pytest_compilecache.render import markdown

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parent.parent


def _report(name: str) -> Dict[str, Any]:
    return json.loads((DATA / f"report_{name}.json").read_text())


@pytest.mark.parametrize("name", ["cpu_examples", "gpu_pass", "drift"])
def test_summary_matches_the_expected_markdown(name: str) -> None:
    expected = (DATA / f"summary_{name}.md").read_text(encoding="utf-8")
    assert markdown.render(_report(name)) == expected


def test_cpu_only_summary_says_what_was_not_exercised() -> None:
    text = markdown.render(_report("cpu_examples"))
    assert "Triton kernel and GPU autotune layers were not exercised" in text
    assert "not exercised" not in markdown.render(_report("gpu_pass"))


def test_a_huge_report_is_cut_to_the_budget_in_order_and_stays_well_formed() -> None:
    data = _report("cpu_examples")
    fail = next(c for c in data["checks"] if c["verdict"] == "fail")
    ok = next(c for c in data["checks"] if c["verdict"] == "pass")
    fail["problems"] = ["outputs: " + "x" * 300] * 50  # long why text
    # copies through JSON (a report is JSON): several times faster than copy.deepcopy
    ok_json, fail_json = json.dumps(ok), json.dumps(fail)
    data["checks"] = [dict(json.loads(ok_json), nodeid=f"t.py::test_ok[{i}]") for i in range(3000)]
    data["checks"] += [dict(json.loads(fail_json), nodeid=f"t.py::test_bad[{i}]")
                       for i in range(3000)]
    text = markdown.render(data)
    assert len(text.encode()) <= markdown.SUMMARY_BUDGET_BYTES
    assert "test_ok[" not in text  # the passing rows went first
    assert "| `t.py::test_bad[2999]` | ❌ fail |" in text  # every failing row stays
    assert "Left out to stay under GitHub's 1024 KiB summary limit" in text
    assert "3000 passing row(s)" in text
    assert text.count("```text") == text.count("\n```\n")  # every fence closed
    assert text.count("<details>") == text.count("</details>")
    small = markdown.render(data, budget=400_000)  # tighter: whole sections go, and it says so
    assert len(small.encode()) <= 400_000 and "failing check section(s)" in small


def test_annotations_escape_data_and_properties() -> None:
    assert gha.escape_data("50% a\r\nb") == "50%25 a%0D%0Ab"
    assert gha.escape_property("t: a,b%\n") == "t%3A a%2Cb%25%0A"
    line = gha.command("error", "x: 1\ny", file="a,b.py", line=3, title="compile-cache: fx miss")
    assert line == "::error file=a%2Cb.py,line=3,title=compile-cache%3A fx miss::x: 1%0Ay"


def test_annotations_worst_first_capped_with_a_count_of_the_rest() -> None:
    data = _report("cpu_examples")
    fail = next(c for c in data["checks"] if c["verdict"] == "fail")
    many = [dict(copy.deepcopy(fail), nodeid=f"examples/test_models.py::test_bad[{i}]")
            for i in range(12)]
    error = dict(copy.deepcopy(fail), nodeid="examples/test_models.py::test_crash",
                 verdict="error", error="cold phase crashed\nTraceback ...", layers={}, problems=[])
    data["checks"] = many + [error]
    lines = gha.annotation_lines(data, workspace="/repo")
    errors = [x for x in lines if x.startswith("::error")]
    assert len(errors) == gha.ANNOTATIONS_PER_STEP
    assert errors[0].startswith("::error file=examples/test_models.py,line=25,"
                                "title=compile-cache%3A error::examples/test_models.py::test_crash%0A")
    assert "title=compile-cache%3A aot_autograd miss" in errors[1]
    assert any(x.startswith("::notice title=compile-cache::3 more failing check(s) not annotated")
               for x in lines)


def test_annotation_paths_are_relative_to_the_repository_root() -> None:
    data = _report("cpu_examples")  # rootdir /repo, test file examples/test_models.py
    data["rootdir"] = "/ws/sub"
    [err] = [x for x in gha.annotation_lines(data, workspace="/ws") if x.startswith("::error")]
    assert err.startswith("::error file=sub/examples/test_models.py,line=25,")
    [err] = [x for x in gha.annotation_lines(data, workspace=None) if x.startswith("::error")]
    assert err.startswith("::error file=examples/test_models.py,")


def test_outputs_are_small_single_line_scalars() -> None:
    out = gha.outputs(_report("cpu_examples"), "/tmp/r.json")
    assert out == {"verdict": "fail", "checks": "2", "passed": "1", "failed": "1", "errors": "0",
                   "drifted": "0", "layers-missed": "aot_autograd", "report-path": "/tmp/r.json",
                   "env-id": out["env-id"], "device": "cpu"}
    assert out["env-id"].startswith("torch2.13.0+cpu-cpu-py")
    assert gha.outputs(_report("drift"))["drifted"] == "1"
    assert gha.outputs({"checks": []})["verdict"] == "skipped"
    assert all("\n" not in x for x in gha.output_lines(out))


@pytest.mark.parametrize("verdict,drifted,fail_on,session_ok,code", [
    ("pass", 0, "fail", True, 0), ("fail", 0, "fail", True, 1), ("error", 0, "fail", True, 1),
    ("fail", 0, "never", True, 0), ("pass", 1, "fail", True, 0), ("pass", 1, "drift", True, 1),
    ("skipped", 0, "fail", True, 0), ("error", 0, "never", False, 2),
])
def test_exit_policy(verdict: str, drifted: int, fail_on: str, session_ok: bool, code: int) -> None:
    assert action.exit_status(verdict, drifted, fail_on, session_ok) == code


def _run_step(step: str, tmp_path: Path, env: Dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    files = {k: tmp_path / k.lower() for k in ("GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY")}
    for f in files.values():
        f.touch()
    full = {**{k: v for k, v in os.environ.items() if not k.startswith(("CC_", "GITHUB_"))},
            **{k: str(v) for k, v in files.items()}, "RUNNER_TEMP": str(tmp_path),
            "GITHUB_WORKSPACE": str(cwd), **env}
    return subprocess.run([sys.executable, "-m", "pytest_compilecache.action", step], cwd=cwd,
                          env=full, capture_output=True, text=True, timeout=300)


def _outputs(tmp_path: Path) -> Dict[str, str]:
    return dict(line.split("=", 1) for line in (tmp_path / "github_output").read_text().splitlines())


def test_a_collection_error_is_an_error_whatever_fail_on_says(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "test_broken.py").write_text("import no_such_module_here\n")
    proc = _run_step("run", tmp_path, {"CC_PYTEST_ARGS": "test_broken.py -p no:cacheprovider",
                                       "CC_DEVICE": "cpu"}, repo)
    assert proc.returncode == 0, proc.stderr  # the upload steps still run
    out = _outputs(tmp_path)
    assert out["verdict"] == "error" and out["session-ok"] == "false" and out["pytest-exit"] == "2"
    assert ("::error title=compile-cache%3A error::pytest exited 2 (interrupted, or an error "
            "during collection)") in proc.stdout
    assert "> [!CAUTION]\n> pytest exited 2" in (tmp_path / "github_step_summary").read_text()
    # the job-private cache root and lock dir, 0700, under RUNNER_TEMP
    [private] = [p for p in tmp_path.iterdir() if p.name.startswith("compilecache-") and
                 p.name != "compilecache-out"]
    assert oct(private.stat().st_mode & 0o777) == "0o700"
    done = _run_step("conclude", tmp_path, {"CC_VERDICT": "error", "CC_SESSION_OK": "false",
                                            "CC_FAIL_ON": "never"}, repo)
    assert done.returncode == 2 and "compile-cache verdict: error" in done.stdout


def test_no_report_at_all_is_an_error(tmp_path: Path) -> None:
    proc = _run_step("run", tmp_path, {"CC_PYTEST_ARGS": "--no-such-option", "CC_DEVICE": "cpu"},
                     tmp_path)
    out = _outputs(tmp_path)
    assert out["verdict"] == "error" and out["report-path"] == "" and out["pytest-exit"] == "4"
    assert "pytest exited 4 without a usable report (none readable at" in proc.stdout
    assert "## 🔥 compile-cache: error" in (tmp_path / "github_step_summary").read_text()


def test_bad_inputs_name_the_input(tmp_path: Path) -> None:
    proc = _run_step("run", tmp_path, {"CC_FAIL_ON": "sometimes"}, tmp_path)
    assert proc.returncode == 2
    assert "::error title=compile-cache%3A input::input fail-on: 'sometimes' is not one of" in proc.stdout
    proc = _run_step("detect", tmp_path, {"CC_REQUIRE_GPU": "true",
                                          "CUDA_VISIBLE_DEVICES": ""}, tmp_path)
    assert proc.returncode == 2 and "require-gpu is true but this runner exposes no GPU" in proc.stdout


def test_pytest_arguments_from_the_inputs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for k in [k for k in os.environ if k.startswith("CC_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("CC_PYTEST_ARGS", "tests -m 'compile_cache and not slow'")
    monkeypatch.setenv("GITHUB_EVENT_NAME", "pull_request")
    monkeypatch.setenv("CC_EVENT_BASE", "a" * 40)
    monkeypatch.setenv("CC_DEPLOY", "true")
    monkeypatch.setenv("CC_SHARD", "2/4")
    argv = action.pytest_argv("r.json", tmp_path / "roots", tmp_path / "locks", "cuda", 4)
    assert argv[3:6] == ["tests", "-m", "compile_cache and not slow"]
    assert f"--compile-cache-baseline={'a' * 40}" in argv and "--compile-cache-baseline-warm" in argv
    assert "--compile-cache-shard=2/4" in argv and argv[-2:] == ["-n", "8"]  # 2 per GPU
    monkeypatch.setenv("GITHUB_EVENT_NAME", "push")  # a push has no PR base to deploy from
    with pytest.raises(action.InputError, match="deploy is true but there is no baseline"):
        action.pytest_argv("r.json", tmp_path, tmp_path, "cpu", 0)


def test_compile_caches_are_kept_only_by_a_push_to_the_default_branch(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for k in [k for k in os.environ if k.startswith("CC_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("CC_MANIFEST_STORE", str(tmp_path / "store"))
    monkeypatch.setenv("CC_COMPILE_CACHES", "true")

    def argv(event: str, saves: str) -> List[str]:
        monkeypatch.setenv("GITHUB_EVENT_NAME", event)
        monkeypatch.setenv("CC_SAVES", saves)  # action.yml: a push to the default branch
        return action.pytest_argv("r.json", tmp_path, tmp_path, "cpu", 0)

    assert "--compile-cache-store-caches" in argv("push", "true")
    assert "--compile-cache-store-caches" not in argv("push", "false")  # another branch
    monkeypatch.setenv("CC_EVENT_BASE", "a" * 40)
    monkeypatch.setenv("CC_DEPLOY", "true")
    pr = argv("pull_request", "false")  # restores main's caches, keeps none
    assert "--compile-cache-baseline-warm" in pr and "--compile-cache-store-caches" not in pr
    monkeypatch.setenv("CC_MANIFEST_CACHE", "false")
    monkeypatch.setenv("CC_DEPLOY", "false")
    with pytest.raises(action.InputError, match="compile caches travel in the manifest cache"):
        argv("push", "true")
    spec = _action()
    (run,) = [st for st in spec["runs"]["steps"] if st.get("id") == "run"]
    assert run["env"]["CC_SAVES"] == ("${{ github.event_name == 'push' && github.ref == "
                                      "format('refs/heads/{0}', "
                                      "github.event.repository.default_branch) }}")
    (save,) = [st for st in spec["runs"]["steps"] if "actions/cache/save" in st.get("uses", "")]
    assert "github.event_name == 'push'" in save["if"] and "default_branch" in save["if"]


# -- action.yml ------------------------------------------------------------------------
def _action() -> Dict[str, Any]:
    yaml = pytest.importorskip("yaml")  # the dev extra (README) installs it; CI runs it
    return yaml.safe_load((ROOT / "action" / "action.yml").read_text())


def test_every_input_reaches_scripts_through_env_only() -> None:
    spec = _action()
    steps = spec["runs"]["steps"]
    used = set()
    for step in steps:
        if "run" in step:
            assert "${{" not in step["run"], step["name"]  # no template injection
            assert step.get("shell") == "bash", step["name"]
        for key, value in (step.get("env") or {}).items():
            for name in re.findall(r"inputs\.([a-z-]+)", str(value)):
                assert key == "CC_" + name.upper().replace("-", "_"), (key, value)
                used.add(name)
    for step in steps:  # inputs given to remote actions go through `with:`/`if:`, not scripts
        for value in list((step.get("with") or {}).values()) + [step.get("if", ""),
                                                                step.get("working-directory", "")]:
            used |= set(re.findall(r"inputs\.([a-z-]+)", str(value)))
    assert set(spec["inputs"]) == used
    for name, value in spec["inputs"].items():
        assert re.fullmatch(r"[a-z]+(-[a-z]+)*", name) and isinstance(value["default"], str)
        assert value.get("description")


def test_remote_actions_are_pinned_and_outputs_map_to_steps() -> None:
    spec = _action()
    ids = {s.get("id") for s in spec["runs"]["steps"]}
    for step in spec["runs"]["steps"]:
        if "uses" in step:
            assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", step["uses"]), step["uses"]
            assert step.get("continue-on-error") is True  # a cache or upload never fails a run
            assert "!env.ACT" in step["if"]
    for name, out in spec["outputs"].items():
        step = re.fullmatch(r"\$\{\{ steps\.([a-z]+)\.outputs\.([a-z-]+) \}\}", out["value"])
        assert step and step.group(1) in ids, name
    save = next(s for s in spec["runs"]["steps"] if s.get("uses", "").startswith("actions/cache/save"))
    assert "github.event_name == 'push'" in save["if"] and "default_branch" in save["if"]
    text = (ROOT / "action" / "action.yml").read_text()
    workflows = "".join(p.read_text() for p in (ROOT / ".github" / "workflows").glob("*.yml"))
    for uses in re.findall(r"uses: *([^\s#]+)", text + workflows):
        assert uses.startswith("./") or re.search(r"@[0-9a-f]{40}$", uses), uses


def test_a_merge_with_an_empty_shard_does_not_say_nothing_was_checked() -> None:
    from pytest_compilecache.render.shard import merge_reports

    full = _report("cpu_examples")
    empty = dict(copy.deepcopy(full), checks=[], no_checks="selected no check")
    merged = merge_reports([empty, full])
    assert merged["checks"] and merged["no_checks"] is None
    assert merge_reports([empty, dict(empty)])["no_checks"] == "selected no check"


def test_a_deploy_check_that_missed_on_key_drift_counts_as_drifted() -> None:
    """Issue 52: the deploy step printed drifted=0 while its check failed on drift. The
    deploy's cold run is the baseline's: a warm miss whose key components differ from
    its cold twin's is drift against the baseline. The rows as a real deploy wrote them
    (CPU, torch 2.13, main's caches under a commit that sets fallback_random; `show
    --format outputs` said drifted=0)."""
    drift = [{"component": "inductor_config[fallback_random]", "cold": "False", "warm": "True"}]
    rows = [{"phase": "cold", "layer": "fx_graph", "compile_id": "0/0", "state": "miss",
             "key": "fxwe7wk6y7d3"},
            {"phase": "warm", "layer": "fx_graph", "compile_id": "0/0", "state": "miss",
             "key": "fgctcbpy3sjs", "drift": drift}]
    check = {"nodeid": "test_model.py::test_mlp", "verdict": "fail", "via": "local",
             "graphs": rows, "layers": {"fx_graph": {"state": "miss"}}}
    data = {"schema": "pytest-compilecache/report", "checks": [check],
            "settings": {"baseline": "main", "baseline_warm": True}}
    assert gha.outputs(data)["drifted"] == "1"
    # a local restart's own keys moving between its runs is no drift against a baseline
    assert gha.outputs({**data, "settings": {}})["drifted"] == "0"
