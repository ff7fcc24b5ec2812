"""Compile once, load on N (`compile_cache(compile_once=N)`, issue 51 point 3), with real
CPU compiles in one pytester session run as a user runs it: the cold phase one process
in a fake process group of 2 (rank 0) with compile_on_one_rank, the warm phase the 2
ranks over gloo loading over its root, then each rank over its own root.

The bodies are benchmarks/fleet/plain_once.py's (docs/fleet.md shows them plain): a
compiled step with a functional all_reduce in its graph, each rank its own input,
passes, every rank's layers hit on what the compiling process wrote, and each rank
computes what its own compile does; a post-grad pass that folds the rank's scale into
a constant (tests/test_ranks.py's) is baked into the one compile as rank 0's, so rank
1 is a false hit naming the compiling process as the writer. (`DDP(torch.compile(net))`
cannot be compiled once: its backward under the fake group fails inside torch's
reducer, in 2.13 and 2.15 alike, plain as in the check.) Run where torch has
compile_on_one_rank (torch.distributed.config in 2.13, torch.compiler.config in 2.15);
elsewhere the check is n/a, which the fast tests of
tests/test_once_rules.py hold.
"""
from __future__ import annotations

import re
from typing import Any, Dict

import pytest

from conftest import run_repo
from test_ranks import BODIES

pytestmark = pytest.mark.slow

ONCE_BODIES = BODIES.split("\n@pytest.mark.compile_cache(")[0] + '''

@pytest.mark.compile_cache(compile_once=2)
def test_all_reduce_once():
    import torch.distributed._functional_collectives as funcol

    torch.manual_seed(0)
    w = torch.randn(8, 8)
    x = torch.randn(4, 8) * (dist.get_rank() + 1)  # each rank its own input

    def step(x, w):
        return funcol.all_reduce(torch.relu(x @ w), "sum", dist.group.WORLD) + 1

    with torch.no_grad():
        assert torch.compile(step)(x, w).shape == (4, 8)


@pytest.mark.compile_cache(compile_once=2)
def test_mlp_once():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()
    torch.manual_seed(1 + dist.get_rank())  # each rank its own batch
    with torch.no_grad():
        assert torch.compile(net)(torch.randn(4, 8)).shape == (4, 4)


@pytest.mark.compile_cache(compile_once=2)
def test_rank_blind_once():
    assert scaled(keyed=False).shape == (4, 8)
'''


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    pytest.importorskip("torch")
    from pytest_compilecache.child.once import coor_config, missing

    if coor_config() is None:
        import torch

        pytest.skip(missing(torch.__version__))
    run = run_repo(tmp_path_factory.mktemp("repo_once"), {"test_once_bodies.py": ONCE_BODIES},
                   "-p", "no:randomly", timeout=900)
    assert run.report is not None, run.out[-3000:]
    checks = {c["nodeid"].split("::")[-1]: c for c in run.report["checks"]}
    return {"run": run, "checks": checks, "out": run.out}


def test_a_model_compiled_once_hits_on_every_rank(session: Dict[str, Any]) -> None:
    c = session["checks"]["test_mlp_once"]
    assert c["verdict"] == "pass" and c["via"] == "compile_once", c["problems"]
    for r in c["ranks"]:
        assert r["verdict"] == "pass", r
        assert {n: r["layers"][n]["state"] for n in ("aot_autograd", "fx_graph")} == {
            "aot_autograd": "hit", "fx_graph": "hit"}, r
        # every entry it loaded is the compiling process's, and it computes its own numbers
        assert {e["writer"] for e in r["loaded_from_other_ranks"]} == {-1}, r
        assert r["outputs"]["private_vs_warm"]["ok"], r
    notes = [n for n in c["notes"] if "that the compiling process wrote" in n]
    assert len(notes) == 2, c["notes"]
    out = session["out"]
    assert re.search(r"test_once_bodies.py::test_mlp_once \[via compile_once\] +pass", out)


def test_a_collective_in_the_graph_misses_and_says_what_is_proven(
        session: Dict[str, Any]) -> None:
    # plain (benchmarks/fleet/plain_once.py all_reduce, torch 2.15): both loaders miss
    # FX and AOTAutograd
    c = session["checks"]["test_all_reduce_once"]
    assert c["verdict"] == "fail", c["problems"]
    for r in c["ranks"]:
        assert {n: r["layers"][n]["state"] for n in ("aot_autograd", "fx_graph")} == {
            "aot_autograd": "miss", "fx_graph": "miss"}, r
    fx = [p for p in c["problems"] if p.startswith("rank 0: fx_graph: miss")]
    assert fx and "not the test's code" in fx[0], c["problems"]
    assert not any("no comparison with cold" in p for p in c["problems"])


def test_a_rank_baked_into_the_one_compile_is_a_false_hit_naming_it(
        session: Dict[str, Any]) -> None:
    c = session["checks"]["test_rank_blind_once"]
    assert c["verdict"] == "fail", c["problems"]
    first = c["problems"][0]
    assert re.match(r"rank false hit: rank 1 loaded the (aot_autograd|fx_graph) entry \w+… of "
                    r"graph 0/0 that the compiling process wrote for every rank", first), first
    assert "writer and loader: the compiling process wrote it, rank 1 loaded it" in first
    assert "fix: make what the compile reads of the rank a graph input" in first
    assert c["ranks"][0]["verdict"] == "pass" and c["ranks"][1]["verdict"] == "fail"
    assert not any("no comparison with cold" in p for p in c["problems"])
    assert "loaded 2 entr(ies) the compiling process wrote" in session["out"]
