"""Checks of multi-rank bodies (`compile_cache(ranks=N)`, issue 51 points 1 and 2) and
of replicas (`compile_cache(replicas=N)`, point 4), with real CPU compiles in one
pytester session run as a user runs it: 2 ranks a phase over gloo, cold and warm over
one root they share, then each over its own; 2 replicas, cold as replica 0 alone, warm
as both at once over its root, then each over its own.

The bodies are benchmarks/fleet/bodies' (the plain torchrun pair's, docs/fleet.md),
written as test bodies: `DDP(torch.compile(net))` trained two steps passes with every
rank's layers hit; a post-grad pass that folds the rank's scale (an input, rank + 1)
into a constant, its uuid() blind to the rank, is a rank false hit naming the writer
and the loader; keyed by the rank it passes (run first in the DDP body, one check for
both: CI time); the 2-way tensor-parallel MLP misses FX and AOTAutograd on every rank,
every logged key component equal, and the check says so. A rank that fails ends the
others of its phase, each reported. Two replicas of a small
MLP pass, every replica's layers hit; the rank-blind pass run as replicas (each folding
its replica's scale, from the environment) is a replica false hit naming writer and
loader (benchmarks/fleet/plain_replicas.py shows the same plain).

Compile once, load on N (`compile_cache(compile_once=N)`, point 3) runs in the same
session (one session where two were: CI time, issue 54 point 4): the cold phase one
process in a fake process group of 2 (rank 0) with compile_on_one_rank, the warm phase
the 2 ranks over gloo loading over its root, then each rank over its own root. The
bodies are benchmarks/fleet/plain_once.py's (`ONCE_BODIES`, docs/fleet.md shows them
plain): a compiled step with a functional all_reduce in its graph, each rank its own
input, misses on every rank as plain; an MLP, each rank its own batch, passes, every
rank's layers hit on what the compiling process wrote, and each rank computes what its
own compile does; the rank-blind pass above is baked into the one compile as rank 0's,
so rank 1 is a false hit naming the compiling process as the writer.
(`DDP(torch.compile(net))` cannot be compiled once: its backward under the fake group
fails inside torch's reducer, in 2.13 and 2.15 alike, plain as in the check.) Where
torch has no compile_on_one_rank (torch.distributed.config in 2.13,
torch.compiler.config in 2.15) those checks are n/a and their tests skip; the fast
tests of tests/test_once_rules.py hold that case.
"""
from __future__ import annotations

import re
from typing import Any, Dict

import pytest

from conftest import run_repo

pytestmark = pytest.mark.slow

BODIES = '''
import os

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch._inductor.custom_graph_pass import CustomGraphPass


class FoldRank(CustomGraphPass):
    """relu(x @ w) * s, s the rank's scale (rank + 1, an input) -> the scale as a
    constant: what pytorch#188332's pass does with dist.get_rank()."""

    def __init__(self, keyed, rank):
        self.rank, self.keyed = rank, keyed

    def __call__(self, graph):
        for node in list(graph.nodes):
            if node.op == "call_function" and node.target is torch.ops.aten.mul.Tensor \\
                    and isinstance(node.args[0], torch.fx.Node) \\
                    and node.args[0].target is torch.ops.aten.relu.default:
                node.args = (node.args[0], float(self.rank + 1))

    def uuid(self):
        return ("fold-rank-v1", self.rank) if self.keyed else "fold-rank-v1"


def scaled(keyed, rank=None):
    rank = dist.get_rank() if rank is None else rank
    torch._inductor.config.post_grad_custom_post_pass = FoldRank(keyed, rank)
    torch.manual_seed(0)
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    s = torch.tensor(float(rank + 1))
    with torch.no_grad():
        return torch.compile(lambda a, b, c: torch.relu(a @ b) * c + 1)(x, w, s)


@pytest.mark.compile_cache(ranks=2)
def test_ddp():
    from torch.nn.parallel import DistributedDataParallel

    # first the pass keyed by the rank (graph 0/0: each rank its own entry), then DDP
    # without it (its graphs one key for both ranks): one check, two bodies (CI time)
    assert scaled(keyed=True).shape == (4, 8)
    torch._inductor.config.post_grad_custom_post_pass = None
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    model = DistributedDataParallel(torch.compile(net))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(1 + dist.get_rank())  # each rank its own batch
    for _ in range(2):
        x, y = torch.randn(4, 8), torch.randn(4, 4)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


@pytest.mark.compile_cache(ranks=2)
def test_rank_blind_pass():
    assert scaled(keyed=False).shape == (4, 8)


@pytest.mark.compile_cache(ranks=2)
def test_one_rank_fails():
    if dist.get_rank() == 1:
        raise RuntimeError("rank 1 gives up before the collective")
    dist.barrier()  # rank 0 waits for a rank that is gone


@pytest.mark.compile_cache(ranks=2)
def test_tp_mlp():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel, RowwiseParallel, parallelize_module)

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))
    parallelize_module(mlp, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    with torch.no_grad():
        assert torch.compile(mlp)(torch.randn(4, 16)).shape == (4, 16)


@pytest.mark.compile_cache(replicas=2)
def test_replicas():
    # each replica's share of the check's threads, as a fresh interpreter has it (forked
    # from a preloaded one that started with all of them)
    assert torch.get_num_threads() == int(os.environ["OMP_NUM_THREADS"])
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()
    with torch.no_grad():
        assert torch.compile(net)(torch.randn(4, 8)).shape == (4, 4)


@pytest.mark.compile_cache(replicas=2)
def test_replica_blind_pass():
    # the replica's scale, as its launcher tells each server which one it is
    replica = int(os.environ["PYTEST_COMPILECACHE_REPLICA"])
    assert scaled(keyed=False, rank=replica).shape == (4, 8)
'''


ONCE_TESTS = '''

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

# the compile-once bodies alone, with the helpers they share (tests/data/once/README.md)
ONCE_BODIES = BODIES.split("\n@pytest.mark.compile_cache(")[0] + ONCE_TESTS


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    files = {"test_ranks_bodies.py": BODIES + ONCE_TESTS}
    run = run_repo(tmp_path_factory.mktemp("repo_ranks"), files, "-p", "no:randomly",
                   timeout=2400)
    assert run.report is not None, run.out[-3000:]
    checks = {c["nodeid"].split("::")[-1]: c for c in run.report["checks"]}
    return {"run": run, "checks": checks, "out": run.out}


def _false_hit(check: Dict[str, Any], pattern: str) -> str:
    """The failed check's first problem, which must be the false hit `pattern` says."""
    assert check["verdict"] == "fail", check["problems"]
    first: str = check["problems"][0]
    assert re.match(pattern, first), first
    return first


def _states(check: Dict[str, Any]) -> Dict[int, Dict[str, str]]:
    return {r["rank"]: {n: r["layers"][n]["state"] for n in ("aot_autograd", "fx_graph")}
            for r in check["ranks"]}


def test_ddp_passes_with_every_ranks_layers_hit(session: Dict[str, Any]) -> None:
    c = session["checks"]["test_ddp"]
    assert c["verdict"] == "pass" and c["via"] == "ranks", c["problems"]
    both = {"aot_autograd": "hit", "fx_graph": "hit"}
    assert _states(c) == {0: both, 1: both}
    # the plain pair's counts per rank warm: DDP's FX 2 hits, AOTAutograd 1 hit, and the
    # keyed pass's 1 and 1 (graph 0/0, run first in the body)
    assert [r["layers"]["fx_graph"]["warm"] for r in c["ranks"]] == ["hit 3", "hit 3"]
    assert [r["layers"]["aot_autograd"]["warm"] for r in c["ranks"]] == ["hit 2", "hit 2"]
    assert all(r["outputs"]["warm_vs_cold"]["ok"] for r in c["ranks"])
    # each rank forked from a preloaded interpreter of its own (a pair a rank: cold, later)
    assert set(c["launch"].values()) == {"forked"}, (c["launch"], c["notes"])
    # one row per check, its ranks underneath
    out = session["out"]
    assert re.search(r"test_ranks_bodies.py::test_ddp \[via ranks\] +pass +off +hit +hit", out)
    assert re.search(r"\n  rank 0 +pass +off +hit +hit", out), out[-3000:]
    assert re.search(r"\n  rank 1 +pass +off +hit +hit", out)


def test_a_rank_blind_pass_is_a_rank_false_hit_naming_writer_and_loader(
        session: Dict[str, Any]) -> None:
    c = session["checks"]["test_rank_blind_pass"]
    assert c["verdict"] == "fail", c["problems"]
    first = c["problems"][0]
    m = re.match(r"rank false hit: rank (\d) loaded the (aot_autograd|fx_graph) entry \w+… of "
                 r"graph 0/0 that rank (\d) wrote in the cold phase \(same key\)", first)
    assert m and m.group(1) != m.group(3), first
    loader, writer = int(m.group(1)), int(m.group(3))
    assert f"writer and loader: rank {writer} wrote it, rank {loader} loaded it" in first
    assert "post_grad_custom_post_pass='fold-rank-v1'" in first
    assert "fix: key the custom graph pass's uuid() by the rank" in first
    row = c["ranks"][loader]
    assert row["outputs"]["private_vs_warm"]["ok"] is False
    assert {e["writer"] for e in row["loaded_from_other_ranks"]} == {writer}
    assert c["ranks"][writer]["outputs"]["private_vs_warm"]["ok"] is True
    assert "FAILED test_ranks_bodies.py::test_rank_blind_pass - rank false hit: rank" \
        in session["out"]


def test_the_same_pass_keyed_by_rank_passes(session: Dict[str, Any]) -> None:
    c = session["checks"]["test_ddp"]  # its body runs the keyed pass first: graph 0/0
    assert c["verdict"] == "pass", c["problems"]
    both = {"aot_autograd": "hit", "fx_graph": "hit"}
    assert _states(c) == {0: both, 1: both}
    loaded = [e["graph"] for r in c["ranks"] for e in r["loaded_from_other_ranks"]]
    assert "0/0" not in loaded, loaded
    # each rank keeps its own entry: the keys differ between ranks, by the pass's uuid
    [note] = [n for n in c["notes"] if n.startswith("keys differ between ranks")]
    assert note.startswith("keys differ between ranks: graph 0/0's FX key"), note
    assert "post_grad_custom_post_pass" in note, note


def test_the_tensor_parallel_mlp_misses_and_says_what_is_proven(
        session: Dict[str, Any]) -> None:
    c = session["checks"]["test_tp_mlp"]
    assert c["verdict"] == "fail"
    both = {"aot_autograd": "miss", "fx_graph": "miss"}
    assert _states(c) == {0: both, 1: both}
    fx = [p for p in c["problems"] if p.startswith("rank 0: fx_graph: miss")]
    assert fx and re.search(r"all \d+ logged components of graph 0/0's FX key hash the same "
                            r"in the cold and warm processes, yet the whole key differs", fx[0])
    assert "not the test's code" in fx[0]
    assert all(r["outputs"]["warm_vs_cold"]["ok"] for r in c["ranks"])
    assert any("keys differ between ranks" in n and "none of its logged components" in n
               for n in c["notes"])


def test_a_failing_rank_ends_the_others_and_each_is_reported(session: Dict[str, Any]) -> None:
    c = session["checks"]["test_one_rank_fails"]
    assert c["verdict"] == "error", c
    error = c["error"]
    assert error.startswith("cold phase failed on rank "), error
    assert "(the first rank to fail ends the others of its phase)" in error
    # each rank's own error: rank 1's exception, rank 0's collective that lost its peer
    assert "\nrank 1: cold.r1 phase failed" in error, error
    assert "RuntimeError: rank 1 gives up before the collective" in error
    assert re.search(r"^rank 0: cold\.r0 phase ", error, re.M), error
    # ended at once, not at the process group's timeout
    assert c["timings"]["cold.r0_process_s"] < 120, c["timings"]


def test_replicas_pass_with_every_replicas_layers_hit(session: Dict[str, Any]) -> None:
    c = session["checks"]["test_replicas"]
    assert c["verdict"] == "pass" and c["via"] == "replicas", c["problems"]
    both = {"aot_autograd": "hit", "fx_graph": "hit"}
    assert _states(c) == {0: both, 1: both}
    # replica 1 warm loaded what replica 0 compiled cold, and computed its own numbers
    assert [e["writer"] for e in c["ranks"][1]["loaded_from_other_ranks"]] == [0, 0]
    assert all(r["outputs"]["private_vs_warm"]["ok"] for r in c["ranks"])
    out = session["out"]
    assert re.search(r"test_ranks_bodies.py::test_replicas \[via replicas\] +pass +off +hit "
                     r"+hit", out), out[-3000:]
    assert re.search(r"\n  replica 1 +pass +off +hit +hit", out)


def test_a_replica_blind_pass_is_a_replica_false_hit_naming_writer_and_loader(
        session: Dict[str, Any]) -> None:
    c = session["checks"]["test_replica_blind_pass"]
    first = _false_hit(c, r"replica false hit: replica 1 loaded the (aot_autograd|fx_graph) "
                          r"entry \w+… of graph 0/0 that replica 0 wrote \(same key\)")
    assert "writer and loader: replica 0 wrote it, replica 1 loaded it" in first
    assert "post_grad_custom_post_pass='fold-rank-v1', equal for both replicas" in first
    assert "what differs between the replicas is not in it" in first
    fix = "fix: key the custom graph pass's uuid() by what differs between the replicas"
    assert fix in first
    assert c["ranks"][0]["verdict"] == "pass" and c["ranks"][1]["verdict"] == "fail"
    assert not any(p.startswith("shared cache damaged") for p in c["problems"])


def _once(session: Dict[str, Any], name: str) -> Dict[str, Any]:
    """A compile-once check's record; skipped where this torch has no
    compile_on_one_rank (the check is n/a there: tests/test_once_rules.py)."""
    from pytest_compilecache.child.once import coor_config, missing

    if coor_config() is None:
        import torch

        pytest.skip(missing(torch.__version__))
    check: Dict[str, Any] = session["checks"][name]
    return check


def test_a_model_compiled_once_hits_on_every_rank(session: Dict[str, Any]) -> None:
    c = _once(session, "test_mlp_once")
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
    assert re.search(r"test_ranks_bodies.py::test_mlp_once \[via compile_once\] +pass", out)


def test_a_collective_in_the_graph_misses_and_says_what_is_proven(
        session: Dict[str, Any]) -> None:
    # plain (benchmarks/fleet/plain_once.py all_reduce, torch 2.15): both loaders miss
    # FX and AOTAutograd
    c = _once(session, "test_all_reduce_once")
    assert c["verdict"] == "fail", c["problems"]
    for r in c["ranks"]:
        assert {n: r["layers"][n]["state"] for n in ("aot_autograd", "fx_graph")} == {
            "aot_autograd": "miss", "fx_graph": "miss"}, r
    fx = [p for p in c["problems"] if p.startswith("rank 0: fx_graph: miss")]
    assert fx and "not the test's code" in fx[0], c["problems"]
    assert not any("no comparison with cold" in p for p in c["problems"])


def test_a_rank_baked_into_the_one_compile_is_a_false_hit_naming_it(
        session: Dict[str, Any]) -> None:
    c = _once(session, "test_rank_blind_once")
    first = _false_hit(c, r"rank false hit: rank 1 loaded the (aot_autograd|fx_graph) entry "
                          r"\w+… of graph 0/0 that the compiling process wrote for every rank")
    assert "writer and loader: the compiling process wrote it, rank 1 loaded it" in first
    assert "fix: make what the compile reads of the rank a graph input" in first
    assert c["ranks"][0]["verdict"] == "pass" and c["ranks"][1]["verdict"] == "fail"
    assert not any("no comparison with cold" in p for p in c["problems"])
    assert "loaded 2 entr(ies) the compiling process wrote" in session["out"]
