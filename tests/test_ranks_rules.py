"""The rules of a multi-rank check (judge/ranks.py) on recorded per-rank records, and
the pieces around them (the marker's and the option's ranks, the ranks' environment,
the rows under a check): fast, no process started. The records are a real session's
(tests/data/ranks/README.md: the four bodies of tests/test_ranks.py, 2 ranks, gloo)."""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict

import pytest

from pytest_compilecache.case import marker_problem
from pytest_compilecache.controller import fleet as controller
from pytest_compilecache.judge import ranks
from pytest_compilecache.model import CheckResult
from pytest_compilecache.options import parse_rank_layout
from pytest_compilecache.paths.ranks import RankedRestart
from pytest_compilecache.scenarios.ranks import Ranks, parse_ranks
from pytest_compilecache.render import lines
from pytest_compilecache.wire import PhaseRecord

DATA = Path(__file__).parent / "data" / "ranks"


def _recorded(name: str) -> Dict[str, PhaseRecord]:
    data = json.loads((DATA / f"{name}.json").read_text())
    return {phase: PhaseRecord.from_json(rec) for phase, rec in data["recs"].items()}


def _loads(phases: Dict[str, PhaseRecord]) -> Dict[int, Dict[str, Any]]:
    writers = ranks.cold_writers(phases, 2)
    return {r: ranks.cross_loads(phases[f"warm.r{r}"], writers, r) for r in (0, 1)}


def test_a_rank_blind_pass_is_a_rank_false_hit_naming_writer_and_loader() -> None:
    phases = _recorded("test_rank_blind_pass")
    loads = _loads(phases)
    assert ranks.needs_private(phases, 2)
    hits = {r: ranks.rank_false_hit(r, loads[r], phases[f"private.r{r}"]) for r in (0, 1)}
    # the rank whose outputs differ from its own compile's: the other computed its own
    [loader] = [r for r, hit in hits.items() if hit]
    writer = 1 - loader
    hit = hits[loader]
    assert hit is not None
    assert hit.startswith(f"rank false hit: rank {loader} loaded the "), hit
    assert f"that rank {writer} wrote in the cold phase (same key)" in hit
    assert f"writer and loader: rank {writer} wrote it, rank {loader} loaded it" in hit
    assert "the key's folder holds 2 files, whose bytes differ" in hit
    assert "post_grad_custom_post_pass='fold-rank-v1', equal for both ranks" in hit
    assert "fix: key the custom graph pass's uuid() by the rank" in hit
    assert {e["writer"]["rank"] for e in loads[loader].values()} == {writer}


def test_ddp_ranks_share_entries_and_compute_their_own_numbers() -> None:
    phases = _recorded("test_ddp")
    loads = _loads(phases)
    loader = next(r for r in (0, 1) if loads[r])
    private = phases[f"private.r{loader}"]
    assert ranks.rank_false_hit(loader, loads[loader], private) is None
    [note] = ranks.shared_note(loader, loads[loader], private)
    assert re.match(rf"rank {loader} loaded \d+ entr\(ies\) that rank\(s\) {1 - loader} wrote, "
                    r"and computed what its own compile", note), note
    assert ranks.keys_between_ranks(phases, 2) == []  # one program, one key per graph


def test_a_pass_keyed_by_rank_keeps_each_ranks_entry() -> None:
    phases = _recorded("test_rank_keyed_pass")
    assert _loads(phases) == {0: {}, 1: {}}
    assert not ranks.needs_private(phases, 2)
    [note] = ranks.keys_between_ranks(phases, 2)
    assert note.startswith("keys differ between ranks: graph 0/0's FX key on rank 1")
    assert "post_grad_custom_post_pass" in note


def test_a_key_with_a_per_process_part_is_said_not_blamed_on_the_user() -> None:
    phases = _recorded("test_tp_mlp")
    said = [ranks.process_part(phases[f"cold.r{r}"], phases[f"warm.r{r}"], "fx_graph: miss")
            for r in (0, 1)]
    assert said[0] is not None and said[1] is not None, said
    assert "logged components of graph 0/0's FX key hash the same in the cold and warm " \
           "processes, yet the whole key differs" in said[0]
    assert "(not the test's code)" in said[0]
    [note] = ranks.keys_between_ranks(phases, 2)
    assert "none of its logged components" in note


def test_a_layer_one_rank_missed_where_another_hit_is_a_problem() -> None:
    hit = CheckResult("t", "pass")
    hit.layers = {"fx_graph": SimpleNamespace(state="hit")}  # type: ignore[dict-item]
    miss = CheckResult("t", "fail")
    miss.layers = {"fx_graph": SimpleNamespace(state="miss")}  # type: ignore[dict-item]
    assert ranks.between_ranks([hit, miss]) == [
        "fx_graph: rank(s) 1 missed where rank(s) 0 hit"]
    assert ranks.worst([hit.layers["fx_graph"], miss.layers["fx_graph"]]).state == "miss"


def test_the_ranks_are_rows_under_their_check_in_every_output() -> None:
    r = CheckResult("t.py::test_ddp", "pass", via="ranks", ranks=[
        {"rank": k, "verdict": "pass", "layers": {"fx_graph": {"state": "hit"},
                                                  "aot_autograd": {"state": "hit"}},
         "outputs": {"warm_vs_cold": {"ok": True}}, "loaded_from_other_ranks": []}
        for k in (0, 1)])
    row = r.summary_row()
    assert [x["rank"] for x in row.ranks] == [0, 1]
    table = lines.summary_lines([row])
    assert any(re.match(r"  rank 1 +pass", x) for x in table), table
    assert r.to_json()["ranks"][0]["layers"]["fx_graph"]["state"] == "hit"
    from pytest_compilecache.render import markdown

    assert any(x.startswith("| ↳ rank 0 | pass |") for x in markdown.table([row]))


def test_ranks_are_read_from_the_marker_else_the_option() -> None:
    def item(**kwargs: Any) -> Any:
        marker = SimpleNamespace(kwargs=kwargs)
        return SimpleNamespace(get_closest_marker=lambda name: marker)

    assert controller.ranks_of(item(ranks=2), SimpleNamespace(ranks=1)) == 2
    assert controller.ranks_of(item(), SimpleNamespace(ranks=4)) == 4
    local = [SimpleNamespace(via="local")]
    assert controller.paths_for(item(), local, SimpleNamespace(ranks=1)) == local
    [path] = controller.paths_for(item(ranks=2), local, SimpleNamespace(ranks=1))
    assert path.via == "ranks" and path.ranks == 2
    # the session's --compile-cache-ranks (the `ranks` scenario) and a check's ranks=1
    session = [RankedRestart.from_settings(SimpleNamespace(ranks=3))]
    assert controller.paths_for(item(), session, SimpleNamespace(ranks=3)) == session
    [path] = controller.paths_for(item(ranks=1), session, SimpleNamespace(ranks=3))
    assert path.via == "local"
    assert "run them in separate sessions" in (
        Ranks().usage_error({"ranks": 2, "shared": True}, {}) or "")
    assert marker_problem((), {"ranks": 2}) is None
    assert "ranks=0" in (marker_problem((), {"ranks": 0}) or "")
    assert parse_ranks("2") == 2 and parse_rank_layout("pinned") == "pinned"
    with pytest.raises(argparse.ArgumentTypeError):
        parse_ranks("0")
    with pytest.raises(argparse.ArgumentTypeError):
        parse_rank_layout("cuda")


def test_each_rank_gets_torchruns_environment() -> None:
    env = controller.rank_env(1, 2, 29500, threads=2)
    assert env == {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "RANK": "1",
                   "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
                   "GROUP_RANK": "0", "OMP_NUM_THREADS": "1"}
    notes = controller.fresh_notes([
        "the cold.r1 phase ran in a fresh interpreter, not forked from a preloaded one: x",
        "other", "the warm.r1 phase ran in a fresh interpreter, not forked: y"])
    assert notes[0] == "other" and notes[1].startswith("2 rank phase(s) (cold, warm) ran")
