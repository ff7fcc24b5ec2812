"""The rules of a replicated check (judge/replicas.py) on recorded per-replica records,
and the pieces around them (the marker's and the option's replicas, each replica's
environment, the phases' counts, the rows under a check): fast, no process started. The
records are a real session's (tests/data/replicas/README.md: the two replica bodies of
tests/test_ranks.py, 2 replicas, CPU)."""
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
from pytest_compilecache.judge import ranks, replicas
from pytest_compilecache.model import CheckResult
from pytest_compilecache.paths.ranks import RankedRestart
from pytest_compilecache.paths.replicas import ReplicatedRestart
from pytest_compilecache.render import lines
from pytest_compilecache.scenarios.replicas import Replicas, parse_replicas
from pytest_compilecache.wire import PhaseRecord

DATA = Path(__file__).parent / "data" / "replicas"


def _recorded(name: str) -> Dict[str, PhaseRecord]:
    data = json.loads((DATA / f"{name}.json").read_text())
    return {phase: PhaseRecord.from_json(rec) for phase, rec in data["recs"].items()}


def _loads(phases: Dict[str, PhaseRecord]) -> Dict[int, Dict[str, Any]]:
    writers = ranks.cold_writers(phases, 2, replicas.REPLICAS.written_in)
    return {r: ranks.cross_loads(phases[f"warm.r{r}"], writers, r, "replica") for r in (0, 1)}


def test_a_replica_blind_pass_is_a_replica_false_hit_naming_writer_and_loader() -> None:
    phases = _recorded("test_replica_blind_pass")
    loads = _loads(phases)
    assert ranks.needs_private(phases, 2, replicas.REPLICAS)
    hit = ranks.rank_false_hit(1, loads[1], phases["private.r1"], replicas.REPLICAS)
    assert hit is not None
    assert re.match(r"replica false hit: replica 1 loaded the (fx_graph|aot_autograd) entry "
                    r"\w+… of graph 0/0 that replica 0 wrote \(same key\)", hit), hit
    assert "writer and loader: replica 0 wrote it, replica 1 loaded it" in hit
    assert "post_grad_custom_post_pass='fold-rank-v1', equal for both replicas" in hit
    assert "; what differs between the replicas is not in it" in hit
    assert "fix: key the custom graph pass's uuid() by what differs between the replicas" in hit
    # replica 0 warm is its own cold compile's restart: it loaded nothing another wrote
    assert loads[0] == {}
    assert ranks.rank_false_hit(0, loads[0], phases["private.r0"], replicas.REPLICAS) is None


def test_healthy_replicas_load_replica_zeros_entries_and_compute_their_own() -> None:
    phases = _recorded("test_replicas")
    loads = _loads(phases)
    assert {e["writer"]["rank"] for e in loads[1].values()} == {0}
    private = phases["private.r1"]
    assert ranks.rank_false_hit(1, loads[1], private, replicas.REPLICAS) is None
    [note] = ranks.shared_note(1, loads[1], private, "replica")
    assert note.startswith("replica 1 loaded 2 entr(ies) that replica(s) 0 wrote, and "
                           "computed what its own compile"), note


def _snapshot(phases: Dict[str, PhaseRecord], *which: str) -> Dict[str, int]:
    """The shared root's entry files as the writes recorded them (the files whole)."""
    return {f"inductor/{rel}": size for phase in which
            for rel, size in phases[phase].raw["rank"]["sizes"].items()}


def test_the_shared_root_after_the_warm_phase_is_held_whole() -> None:
    phases = _recorded("test_replicas")
    built = _snapshot(phases, "cold.r0")
    assert built and replicas.shared_root_damage(phases, {"cold.r0": built,
                                                          "warm.r0": dict(built)}, 2) == []
    # a file the cold replica built, cut short while the replicas read it
    cut = {**built, next(iter(built)): 3}
    [line] = replicas.shared_root_damage(phases, {"cold.r0": built, "warm.r0": cut}, 2)
    assert line.startswith("shared cache damaged while 2 replicas read and wrote it at once: "
                           f"{next(iter(built))}: 3 bytes, cold wrote "), line
    assert line.endswith("(replica 0 built it cold)")
    # a warm replica's write (a replica that missed) not in the root whole
    warm = PhaseRecord.from_json({**phases["warm.r1"].raw, "rank": {
        "rank": 1, "writes": {"fxgraph/ab/k/f": "d"}, "sizes": {"fxgraph/ab/k/f": 10}}})
    torn = {**phases, "warm.r1": warm}
    [line] = replicas.shared_root_damage(torn, {"cold.r0": built, "warm.r0": {
        **built, "inductor/fxgraph/ab/k/f": 4}}, 2)
    assert line.endswith("inductor/fxgraph/ab/k/f: 4 bytes, replica 1 wrote 10 bytes")


def test_replicas_are_read_from_the_marker_else_the_option() -> None:
    def item(**kwargs: Any) -> Any:
        marker = SimpleNamespace(kwargs=kwargs)
        return SimpleNamespace(get_closest_marker=lambda name: marker)

    local = [SimpleNamespace(via="local")]
    [path] = controller.paths_for(item(replicas=2), local, SimpleNamespace(ranks=1))
    assert isinstance(path, ReplicatedRestart) and path.size == 2
    session = [ReplicatedRestart.from_settings(SimpleNamespace(replicas=3))]
    assert session[0].size == 3
    assert controller.paths_for(item(), session, SimpleNamespace(replicas=3)) == session
    # a check's own marker: ranks in a session of replicas, one replica (the local restart)
    [path] = controller.paths_for(item(ranks=2), session, SimpleNamespace(replicas=3))
    assert isinstance(path, RankedRestart) and path.ranks == 2
    [path] = controller.paths_for(item(replicas=1), session, SimpleNamespace(replicas=3))
    assert path.via == "local"
    assert "ranks and replicas together" in (marker_problem((), {"ranks": 2, "replicas": 2})
                                             or "")
    assert "replicas=0" in (marker_problem((), {"replicas": 0}) or "")
    assert "run them in separate sessions" in (
        Replicas().usage_error({"replicas": 2, "ranks": 2}, {}) or "")
    assert parse_replicas("4") == 4
    with pytest.raises(argparse.ArgumentTypeError, match="the number of replicas"):
        parse_replicas("0")


def test_cold_is_one_process_and_warm_every_replica_with_no_process_group() -> None:
    path = ReplicatedRestart(3)
    assert [(p.name, path.processes(p), p.process_group) for p in path.phases] == [
        ("cold", 1, False), ("warm", 3, False), ("private", 3, False)]
    assert path.layout == "pinned"  # one server per GPU, each sees its own as cuda:0
    ranked = RankedRestart(3)
    assert [(ranked.processes(p), p.process_group) for p in ranked.phases] == [(3, True)] * 3
    # each replica told which one it is, with the same threads in every phase (a cold
    # replica with all of them misses every warm one: cpp_runtime_thread_count)
    cold, warm, _ = path.phases
    assert controller.process_env(ReplicatedRestart(2), cold, 0, 0, threads=2) == {
        "PYTEST_COMPILECACHE_REPLICA": "0", "OMP_NUM_THREADS": "1"}
    assert controller.process_env(ReplicatedRestart(2), warm, 1, 0, threads=2) == {
        "PYTEST_COMPILECACHE_REPLICA": "1", "OMP_NUM_THREADS": "1"}
    assert controller.process_env(ranked, ranked.phases[0], 1, 29500, threads=3)["RANK"] == "1"
    [note] = controller.fresh_notes(["the warm.r1 phase ran in a fresh interpreter, x"],
                                    "replica")
    assert note.startswith("1 replica phase(s) (warm) ran in a fresh interpreter")


def test_the_replicas_are_rows_under_their_check() -> None:
    r = CheckResult("t.py::test_replicas", "pass", via="replicas", ranks=[
        {"rank": k, "noun": "replica", "verdict": "pass",
         "layers": {"fx_graph": {"state": "hit"}, "aot_autograd": {"state": "hit"}},
         "outputs": {"private_vs_warm": {"ok": True}},
         "loaded_from_other_ranks": [{"writer": 0}] if k else []} for k in (0, 1)])
    table = lines.summary_lines([r.summary_row()])
    assert any(re.match(r"  replica 1 +pass", x) for x in table), table
    from pytest_compilecache.render.ranks import rank_lines

    said = rank_lines(r)
    assert said[1] == "  replicas (2):"
    assert said[3].startswith("  - replica 1: pass; fx_graph hit, aot_autograd hit; outputs "
                              "vs its own compile equal; loaded 1 entr(ies) replica(s) 0 wrote")
