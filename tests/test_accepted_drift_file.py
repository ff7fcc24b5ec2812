"""The rules of compilecache-accepted.json on recorded comparisons (pure; the sessions of
test_accepted_drift.py run the one command and the deploy over real caches)."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Dict

import pytest

from conftest import git
from pytest_compilecache.cli import main
from pytest_compilecache.history import accepted_drift as ad
from pytest_compilecache.history import manifest as mf
from pytest_compilecache.judge.accepted import apply_drift
from pytest_compilecache.model import CheckResult, LayerVerdict
from pytest_compilecache.render import gha


def entry(key: str, flag: str) -> Dict[str, Any]:
    return {"verdict": "pass", "graphs": {
        f"{layer}:0/0": {"layer": layer, "key": f"{layer[0]}{key}",
                         "components": [["inductor_config[fallback_random]", flag, flag]]}
        for layer in ("aot_autograd", "fx_graph")}}


BASE, FLIPPED = entry("1", "False"), entry("2", "True")
LATER = {"verdict": "pass", "graphs": {**FLIPPED["graphs"], "fx_graph:0/0": {
    "layer": "fx_graph", "key": "f3", "components": [
        ["inductor_config[fallback_random]", "True", "True"], ["gm", "g2", "y = x * 3"]]}}}


def accepted_entry() -> Dict[str, Any]:
    return ad.entry_of(mf.compare_check(BASE, FLIPPED), 'abc "main"')


def test_an_entry_accepts_that_change_exactly_and_nothing_later() -> None:
    e = accepted_entry()
    assert e["components"] == ["inductor_config[fallback_random]"]
    assert e["graphs"]["fx_graph:0/0"] == {"old": "f1", "new": "f2", "changes": FLIP}
    cmp = mf.compare_check(BASE, FLIPPED)
    assert ad.accept(cmp, e) and cmp["status"] == "accepted" and cmp["accepted_by"] == ad.FILE
    later = mf.compare_check(BASE, LATER)
    assert not ad.accept(later, e) and later["status"] == "drifted"
    assert not ad.accept(mf.compare_check(BASE, FLIPPED), None)


def test_stale_entries_are_said_with_the_command_that_prunes_them() -> None:
    e = {"t.py::test_a": accepted_entry(), "t.py::test_b": accepted_entry(),
         "t.py::test_c": accepted_entry(), "t.py::test_d": accepted_entry()}
    cmps = {"t.py::test_a": mf.compare_check(BASE, FLIPPED),  # still that change: not stale
            "t.py::test_b": mf.compare_check(FLIPPED, FLIPPED),  # main has it: no drift
            "t.py::test_c": mf.compare_check(BASE, LATER)}  # another change on top
    lines = ad.stale_lines(e, cmps, "main")  # test_d was not run: not judged
    assert lines == [
        f"{ad.FILE}: stale entry t.py::test_b: its check's keys no longer drift (unchanged); "
        f"prune it: `pytest-compilecache accept main --prune`",
        f"{ad.FILE}: stale entry t.py::test_c: its check's drift is another now (gm, "
        f"inductor_config[fallback_random]; accepted: inductor_config[fallback_random]); "
        f"prune it: `pytest-compilecache accept main --prune`"]
    gone = {"t.py::test_a": mf.compare_check(BASE, None)}
    assert ad.update(e, gone, "x", prune_only=True).keys() == {
        "t.py::test_b", "t.py::test_c", "t.py::test_d"}


def test_the_file_round_trips_and_a_broken_one_names_its_repair(tmp_path: Path) -> None:
    path = tmp_path / ad.FILE
    assert ad.load(path) == {}
    ad.write(path, {"t.py::test_a": accepted_entry()})
    assert ad.load(path) == {"t.py::test_a": accepted_entry()}
    path.write_text('{"checks": []}')
    with pytest.raises(ad.AcceptedFileError, match="delete it and accept again with "
                                                  "`pytest-compilecache accept REF`"):
        ad.load(path)


FLIP = {"inductor_config[fallback_random]": ["False", "True"]}
DRIFT = [{"component": "inductor_config[fallback_random]", "cold": "False", "warm": "True",
          "cold_hash": "False", "warm_hash": "True"}]
GM_TOO = [*DRIFT, {"component": "gm", "cold": "g1", "warm": "y = x * 3",
                   "cold_hash": "g1", "warm_hash": "g2"}]


def rows(warm_fx: str, fx_drift: list, machine: str = "") -> list:
    """The deploy's graph rows: each warm miss's drift from its cold twin (the base's)."""
    out = []
    for layer, cold, warm, drift in (("aot_autograd", "a1", "a2", DRIFT),
                                     ("fx_graph", "f1", warm_fx, fx_drift)):
        out += [{"phase": "cold", "layer": layer, "compile_id": "0/0", "key": cold + machine,
                 "state": "miss"},
                {"phase": "warm", "layer": layer, "compile_id": "0/0", "key": warm + machine,
                 "state": "miss", "drift": drift}]
    return out


def deployed(warm_fx: str, fx_drift: list = DRIFT, machine: str = "") -> CheckResult:
    res = CheckResult(nodeid="t.py::test_a", verdict="pass", via="local",
                      graphs=rows(warm_fx, fx_drift, machine))
    for name in ("aot_autograd", "fx_graph", "kernels"):
        res.layers[name] = LayerVerdict(state="miss", reasons=["drifted"])
        res.problems.append(f"{name}: miss")
    return res.finalize()


def test_the_deploy_accepts_the_misses_the_accepted_drift_explains() -> None:
    res = deployed("f2")
    apply_drift(res, accepted_entry(), "main", ("aot_autograd", "fx_graph"))
    assert res.verdict == "pass", res.problems
    assert {n: lv.state for n, lv in res.layers.items()} == dict.fromkeys(
        ("aot_autograd", "fx_graph", "kernels"), "accepted")
    assert not gha.keys_drifted(res, deployed=True)  # the Action's `drifted` output: 0
    assert res.notes == [f"the drift {ad.FILE} accepts (inductor_config[fallback_random]) "
                         f"explains the misses of aot_autograd, fx_graph, kernels"]


def test_a_miss_the_accepted_drift_does_not_explain_fails_naming_the_command() -> None:
    res = deployed("f3", GM_TOO)  # a later change: not the accepted one
    apply_drift(res, accepted_entry(), "main", ("aot_autograd", "fx_graph"))
    assert res.verdict == "fail"
    assert {n: lv.state for n, lv in res.layers.items()} == {
        "aot_autograd": "accepted", "fx_graph": "miss", "kernels": "miss"}
    assert gha.keys_drifted(res, deployed=True)
    assert res.problems[-1].startswith("keys changed against main; if the change is meant, "
                                       "accept it in the repository: ")
    assert "`pytest-compilecache accept main -- <the pytest arguments" in res.problems[-1]


def test_accept_reads_the_stores_manifests_and_writes_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    base, head = tmp_path / "base.json", tmp_path / "head.json"
    for path, e in ((base, BASE), (head, FLIPPED)):
        m = mf.new_manifest({"sha": path.stem, "short": path.stem}, {})
        m["checks"]["t.py::test_a"] = e
        path.write_text(json.dumps(m))
    git(tmp_path, "init", "-q")
    monkeypatch.chdir(tmp_path)
    assert main(["accept", "--head", str(head), str(base)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("accepted  t.py::test_a: inductor_config[fallback_random] "
                          "(2 graph(s))\n"), out
    assert ad.load(tmp_path / ad.FILE)["t.py::test_a"]["graphs"]["fx_graph:0/0"] == {
        "old": "f1", "new": "f2", "changes": FLIP}
    assert main(["accept", "--head", str(head), str(base)]) == 0
    assert capsys.readouterr().out.endswith(": nothing to change\n")


def test_the_controller_says_stale_entries_from_the_checks_drift(tmp_path: Path) -> None:
    """Under xdist the workers compare the keys: the controller reads each check's drift
    from its result to say the stale entries."""
    from types import SimpleNamespace

    from pytest_compilecache.controller.keyhistory import KeyHistory

    git(tmp_path, "init", "-q")
    ad.write(tmp_path / ad.FILE, {"t.py::test_a": accepted_entry()})
    settings = SimpleNamespace(baseline="main", baseline_warm=False, store="none")
    history = KeyHistory(SimpleNamespace(rootpath=tmp_path), settings)  # type: ignore[arg-type]
    history._commit = {"sha": "abc", "dirty": False}  # what git would say
    res = CheckResult(nodeid="t.py::test_a", verdict="fail",
                      drift={"base": "main", **mf.compare_check(BASE, LATER)})
    assert history.summary_line([]) is None
    said = history.summary_line([res])
    assert said is not None and said.startswith(f"{ad.FILE}: stale entry t.py::test_a: its "
                                                f"check's drift is another now"), said


def test_accept_takes_options_before_ref_and_pytest_args_after_the_dashes(
        capsys: pytest.CaptureFixture) -> None:
    assert main(["accept", "main", "--prune"]) == 2
    assert capsys.readouterr().err.strip() == (
        "pytest-compilecache accept: options go before REF, pytest's arguments after --: "
        "--prune")


@pytest.mark.parametrize("argv", [["main", "--", "tests", "-m", "compile_cache"],
                                  ["--prune", "main", "--", "tests", "-m", "compile_cache"]])
def test_accept_takes_the_pytest_args_the_failure_names_after_the_dashes(
        argv: list, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command a failing deploy names, `accept main -- <pytest args>`: argparse drops
    the `--` on some Pythons, and the args must still reach the keys-only session."""
    from pytest_compilecache import cliaccept

    recorded: list = []

    def record(ref: str, pytest_args: list, store: object = None) -> None:
        recorded.append((ref, pytest_args))
        raise SystemExit(0)

    git(tmp_path, "init", "-q")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cliaccept, "_record_head", record)
    with pytest.raises(SystemExit):
        main(["accept", *argv])
    assert recorded == [("main", ["tests", "-m", "compile_cache"])]


def test_accept_records_the_keys_into_the_store_it_then_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`accept --store DIR REF -- ARGS`: the keys-only session wrote to the default store
    while accept read DIR, which lacked the head's keys (the PR lane, issue 52)."""
    from pytest_compilecache import cliaccept

    started: list = []

    def run(argv: list, **kwargs: object) -> None:
        started.append(argv)
        raise SystemExit(0)

    git(tmp_path, "init", "-q")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cliaccept.subprocess, "run", run)
    with pytest.raises(SystemExit):
        main(["accept", "--store", "ci-store", "main", "--", "tests"])
    assert started and started[0][-1] == "--compile-cache-store=ci-store", started


def test_a_stale_entry_whose_components_are_the_same_names_the_keys_that_changed() -> None:
    # issue 52's newcomer: a custom op's backward edited after the accepted change gave
    # "its check's drift is another now (example_inputs[1], gm; accepted: example_inputs[1],
    # gm)": the same names on both sides, nothing said of what differs
    again = mf.compare_check(BASE, entry("3", "1"))  # the same flag, to another value
    why = ad.stale_reason(accepted_entry(), again)
    assert why is not None and why.startswith(
        "its check's keys changed again in the same components "
        "(inductor_config[fallback_random]): "), why
    assert ("aot_autograd:0/0 a1… -> a3…, accepted a1… -> a2…" in why
            or "fx_graph:0/0 f1… -> f3…, accepted f1… -> f2…" in why), why


# functorch's config as torch 2.13.0 (CPU) hashes it into every AOTAutograd key, CI unset
# and CI=true (error_on_custom_op_aliasing defaults to CI): two processes over one
# TORCHINDUCTOR_CACHE_DIR, the second with CI=true, missed AOTAutograd on that component
AUTOGRAD_CONFIG = {"local": "jw4zp6st3lsywg7465untpwcyjf7cs75swes6gsp2uhxrs3aoxp",
                   "ci": "43yjk5ijs2bzpejhevrrahlc7hjme2ydwaogarxn5g6d2hx7mnq"}


def on(machine: str, record: Dict[str, Any]) -> Dict[str, Any]:
    """A check's record as a machine computes it: its autograd_config in the AOT key, and
    every key other for it."""
    out = copy.deepcopy(record)
    for g in out["graphs"].values():
        g["key"] += f"-{machine}"
        if g["layer"] == "aot_autograd":
            g["components"].append(["autograd_config", AUTOGRAD_CONFIG[machine], "<pickle>"])
    return out


def test_an_acceptance_recorded_with_ci_unset_accepts_the_run_with_ci_true() -> None:
    """`accept` on a laptop (CI unset), the keys-only drift and the deploy on GitHub
    (CI=true): other keys on both sides, the same components changed between the same
    values. A later change is still not accepted."""
    e = ad.entry_of(mf.compare_check(on("local", BASE), on("local", FLIPPED)), "main")
    ci = mf.compare_check(on("ci", BASE), on("ci", FLIPPED))
    assert ci["graphs"][0]["old_key"] != e["graphs"]["aot_autograd:0/0"]["old"]
    assert ad.accept(ci, e) and ci["status"] == "accepted"
    assert ad.stale_lines({"t.py::test_a": e}, {"t.py::test_a": ci}, "main") == []
    assert not ad.accept(mf.compare_check(on("ci", BASE), on("ci", LATER)), e)
    res = deployed("f2", machine="-ci")
    apply_drift(res, e, "main", ("aot_autograd", "fx_graph"))
    assert res.verdict == "pass", res.problems
    later = deployed("f3", GM_TOO, machine="-ci")
    apply_drift(later, e, "main", ("aot_autograd", "fx_graph"))
    assert later.verdict == "fail" and later.layers["fx_graph"].state == "miss"
