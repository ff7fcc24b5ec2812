"""The rules of compile once, load on N (judge/once.py, paths/compile_once.py,
child/once.py) on records, and the pieces around them (the marker, the option, each
phase's environment, what a torch without compile_on_one_rank is told): fast, no
process started. The records are a real compile-once session's (tests/data/once,
torch 2.15), and tests/data/ranks' (a 2-rank session's) with the cold phase's two
ranks taken as one compiling process that wrote every entry."""
from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict

import pytest

from pytest_compilecache.case import marker_problem
from pytest_compilecache.controller import fleet as controller
from pytest_compilecache.judge import ranks
from pytest_compilecache.judge.once import ONCE, judge_once
from pytest_compilecache.paths.compile_once import CompileOnceRestart
from pytest_compilecache.scenarios.compile_once import CompileOnce, parse_once
from pytest_compilecache.terms import FAKE_WORLD_ENV, ONCE_ENV
from pytest_compilecache.wire import PhaseRecord

DATA = Path(__file__).parent / "data" / "ranks"
ONCE_DATA = Path(__file__).parent / "data" / "once"  # a real compile-once session's


def _compiled_once(name: str) -> Dict[str, PhaseRecord]:
    """A ranks session's records with its cold ranks as one compiling process."""
    recs = json.loads((DATA / f"{name}.json").read_text())["recs"]
    writes = {**recs["cold.r1"]["rank"]["writes"], **recs["cold.r0"]["rank"]["writes"]}
    recs["cold.r0"]["rank"].update(writes=writes, backend="fake")
    del recs["cold.r1"]
    return {phase: PhaseRecord.from_json(rec) for phase, rec in recs.items()}


def test_a_rank_baked_into_the_one_compile_names_the_compiling_process() -> None:
    phases = _compiled_once("test_rank_blind_pass")
    writers = ranks.fleet_writers(phases, 2, ONCE)
    loads = {r: ranks.cross_loads(phases[f"warm.r{r}"], writers, r) for r in (0, 1)}
    # every entry a rank loads is the compiling process's, its own rank's or not
    assert all(loads[r] for r in (0, 1))
    assert {e["writer"]["id"] for r in (0, 1) for e in loads[r].values()} == {
        "the compiling process"}
    hits = {r: ranks.rank_false_hit(r, loads[r], phases[f"private.r{r}"], ONCE)
            for r in (0, 1)}
    [loader] = [r for r, hit in hits.items() if hit]
    hit = hits[loader] or ""
    assert hit.startswith(f"rank false hit: rank {loader} loaded the "), hit
    assert "that the compiling process wrote for every rank (rank 0 of a fake process " \
           "group, compile_on_one_rank) (same key)" in hit
    assert f"writer and loader: the compiling process wrote it, rank {loader} loaded it" in hit
    assert "the rank is not in it: one compile serves every rank" in hit
    assert "fix: make what the compile reads of the rank a graph input" in hit
    res = judge_once("t.py::test_rank_blind", phases, _snaps(phases), {}, None, 2)
    assert res.verdict == "fail" and res.via == "compile_once"
    assert res.problems[0] == hit
    [note] = [n for n in res.notes if "that the compiling process wrote" in n]
    assert note.startswith(f"rank {1 - loader} loaded ")


def test_each_loader_is_held_to_its_own_compile_even_where_ranks_would_not() -> None:
    # keyed by rank, each rank of a job loads its own entry (no private phase is needed);
    # compiled once, every entry is the compiling process's, so every rank is held
    phases = _compiled_once("test_ddp")
    assert ranks.needs_private(phases, 2, ONCE)
    res = judge_once("t.py::test_ddp", phases, _snaps(phases), {}, None, 2)
    assert res.verdict == "pass", res.problems
    assert [e["writer"] for r in res.ranks for e in r["loaded_from_other_ranks"]] \
        and {e["writer"] for r in res.ranks for e in r["loaded_from_other_ranks"]} == {-1}


def _snaps(phases: Dict[str, PhaseRecord]) -> Dict[str, Any]:
    return {phase: {} for phase in phases}


def test_where_torch_has_no_compile_on_one_rank_the_check_is_na_naming_both(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    import torch

    from pytest_compilecache.child import once

    for name in ("torch.compiler.config", "torch.distributed.config"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))  # a torch without it
    assert once.coor_config() is None
    why = CompileOnceRestart().not_applicable("body", None) or ""
    assert why.startswith(f"torch {torch.__version__} has no compile_on_one_rank"), why
    assert "torch.compiler.config.compile_on_one_rank, as torch 2.15 has" in why
    assert "torch.distributed.config.compile_on_one_rank, as torch 2.13 has" in why
    cold = PhaseRecord.from_json({"phase": "cold.r0", "artifact": {"na": why}})
    assert not CompileOnceRestart().goes_on(cold)
    res = judge_once("t.py::test_x", {"cold.r0": cold}, {}, {}, None, 2)
    assert res.verdict == "n/a" and res.notes == [f"compile_once: {why}"]


def test_torch_here_has_one_of_the_two_names() -> None:
    pytest.importorskip("torch")
    from pytest_compilecache.child import once

    found = once.coor_config()
    assert found is not None and found[1].endswith(".compile_on_one_rank")


def test_the_marker_the_option_and_each_phases_environment() -> None:
    def item(**kwargs: Any) -> Any:
        marker = SimpleNamespace(kwargs=kwargs)
        return SimpleNamespace(get_closest_marker=lambda name: marker)

    settings = SimpleNamespace(ranks=1, replicas=1, compile_once=1)
    [path] = controller.paths_for(item(compile_once=2), [], settings)
    assert isinstance(path, CompileOnceRestart) and path.size == 2
    cold, warm, private = path.phases
    assert [path.processes(p) for p in path.phases] == [1, 2, 2]
    assert path.phase_env(cold) == {ONCE_ENV: "1", FAKE_WORLD_ENV: "2"}
    assert path.phase_env(warm) == path.phase_env(private) == {ONCE_ENV: "1"}
    assert warm.process_group and not cold.process_group and private.fresh_root
    assert "ranks and compile_once together" in (
        marker_problem((), {"ranks": 2, "compile_once": 2}) or "")
    assert marker_problem((), {"compile_once": 2}) is None
    assert parse_once("3") == 3
    with pytest.raises(argparse.ArgumentTypeError):
        parse_once("0")
    assert "run them in separate sessions" in (
        CompileOnce().usage_error({"compile_once": 2, "ranks": 2}, {}) or "")


def test_no_loader_is_faulted_for_not_comparing_with_the_compiling_process() -> None:
    from pytest_compilecache.judge.once import held_to_own_compile
    from pytest_compilecache.judge.outputs import NO_COLD
    from pytest_compilecache.model import CheckResult
    from pytest_compilecache.render import ranks as render

    row = {"rank": 0, "verdict": "fail", "problems": [NO_COLD], "layers": {},
           "outputs": {"private_vs_warm": {"ok": True}},
           "loaded_from_other_ranks": [{"key": "k", "writer": -1}]}
    res = CheckResult("t.py::test_x", "pass", via="compile_once", ranks=[row],
                      problems=[f"rank 0: {NO_COLD}"]).finalize()
    assert res.verdict == "fail"
    res = held_to_own_compile(res)
    assert res.verdict == "pass" and row["verdict"] == "pass" and row["problems"] == []
    assert render._loaded(row) == "; loaded 1 entr(ies) the compiling process wrote"


@pytest.mark.parametrize("name", ["test_mlp_once", "test_rank_blind_once",
                                  "test_all_reduce_once"])
def test_the_recorded_session_is_judged_as_it_was(name: str) -> None:
    data = json.loads((ONCE_DATA / f"{name}.json").read_text())
    phases = {k: PhaseRecord.from_json(v) for k, v in data["recs"].items()}
    assert phases["cold.r0"].raw["rank"]["backend"] == "fake"
    res = judge_once(data["nodeid"], phases, _snaps(phases), {}, None, 2)
    expected = data["expected"]
    assert res.verdict == expected["verdict"]
    assert [r["verdict"] for r in res.ranks] == [r["verdict"] for r in expected["ranks"]]
    # the first problem's first line (the cut records keep 6 of the key's components)
    def head(problems: Any) -> Any:
        return [x.splitlines()[0].split(" - all ")[0] for x in problems[:1]]

    assert head(res.problems) == head(expected["problems"])
