"""The autotune layer counts tuning that really ran in a phase process, never the
counters torch replays from an FX-graph cache hit (`counters["inductor"] +=
graph.counter_deltas`).

- A real CPU session: freezing + max-autotune selects a C++ GEMM template by benchmarking
  (AlgorithmSelectorCache); the warm process finds the choice in the local autotune cache
  and benchmarks nothing.
- Recorded GPU phases (tests/data/autotune_gpu/, see its README): an MLP under
  `max-autotune-no-cudagraphs` on an H100, whose warm FX hit replayed
  `select_algorithm_autotune` while nothing was tuned; the same MLP with its
  `.best_config` files deleted between the phases, which really tuned again; resnet18
  under `max-autotune`, which torch 2.11 re-tunes; a convnext training step with a
  kernel torch keeps no tuning result for.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import RepoRun, run_repo

DATA = Path(__file__).parent / "data" / "autotune_gpu"

FROZEN = '''
import pytest
import torch

from pytest_compilecache import ModelCase

torch._inductor.config.freezing = True  # CPU serving: weights folded, GEMM templates


@pytest.fixture
def mlp():
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64))
    return ModelCase(model, example_inputs=(torch.randn(32, 64),))


@pytest.mark.compile_cache(mode="max-autotune-no-cudagraphs")
def test_frozen_max_autotune(mlp):
    ...
'''


@pytest.fixture(scope="module")
def frozen(tmp_path_factory: pytest.TempPathFactory) -> RepoRun:
    return run_repo(tmp_path_factory.mktemp("repo_autotune"), {"test_frozen.py": FROZEN})


@pytest.mark.slow
def test_template_selection_is_counted_where_it_runs(frozen: RepoRun) -> None:
    c = frozen.check("test_frozen_max_autotune")
    lv = c["layers"]["autotune"]
    # cold benchmarked the C++ GEMM template's choices for both linears; warm read them
    # from the local autotune cache (torch bypasses the FX cache under freezing: the
    # check fails for that, truthfully, and says so)
    assert lv["state"] == "hit", (lv, frozen.out[-3000:])
    assert lv["cold"].startswith("2 tuned: 2 template selection(s)"), lv
    assert lv["warm"] == "0 tuned"
    assert c["layers"]["fx_graph"]["state"] == "bypass"


def _layer(name: str):
    from pytest_compilecache.layers.autotune import autotune_layer
    from pytest_compilecache.judge.verdict import counter

    rec = json.loads((DATA / f"{name}.json").read_text())
    cold, warm = rec["cold"]["cache"], rec["warm"]["cache"]
    return (*autotune_layer(cold, warm, []), warm, counter)


def test_a_warm_fx_hit_that_replayed_autotune_counters_reads_hit() -> None:
    lv, notes, warm, counter = _layer("mlp_max_autotune")
    # torch replayed the cold compile's counters on the FX hit...
    assert counter(warm, "inductor", "select_algorithm_autotune") == 2
    assert counter(warm, "inductor", "coordesc_tuning_bench") > 0
    # ...while the warm process tuned nothing
    assert (lv.state, lv.warm, notes) == ("hit", "0 tuned", []), lv
    assert lv.cold.startswith("6 tuned: 2 template selection(s) (mm, addmm)"), lv.cold


def test_deleted_tuning_results_fail_naming_autotune() -> None:
    lv, _, _, _ = _layer("mlp_best_config_deleted")
    assert lv.state == "miss"
    assert lv.reasons[0] == ("the warm run really tuned: 1 config benchmark(s) "
                             "(triton_poi_fused_addmm_relu_0), 1 coordinate-descent tuning(s) "
                             "(triton_poi_fused_addmm_relu_0)"), lv.reasons
    assert "no tuning result stored for it: triton_poi_fused_addmm_relu_0" in lv.reasons[1]


def test_a_stored_result_torch_does_not_reload_is_named() -> None:
    lv, _, _, _ = _layer("resnet18_max_autotune")
    assert lv.state == "miss" and lv.warm.startswith("6 tuned: 6 coordinate-descent"), lv
    assert any("names a config outside the kernel's list, which this torch does not reload"
               in r for r in lv.reasons), lv.reasons


def test_a_kernel_torch_keeps_no_result_for_is_a_note_not_a_miss() -> None:
    lv, notes, _, _ = _layer("convnext_tiny_training")
    assert lv.state == "hit" and lv.warm.startswith("1 tuned: 1 config benchmark(s)"), lv
    assert len(notes) == 1 and "no cache could spare" in notes[0], notes
    assert "triton_red_fused_add_native_layer_norm_backward_permute_81" in notes[0]


def test_a_torch_without_a_spy_leaves_that_kind_unjudged_and_says_so() -> None:
    from pytest_compilecache.layers.autotune import autotune_layer

    rec = json.loads((DATA / "mlp_max_autotune.json").read_text())
    cold, warm = rec["cold"]["cache"], rec["warm"]["cache"]
    for phase in (cold, warm):  # as on a torch where PersistentCache.lookup is absent
        t = phase["tuning"]
        del t["watched"]["select"]
        t["unwatched"]["select"] = "this torch has none of PersistentCache.lookup"
    lv, notes = autotune_layer(cold, warm, [])
    # the replayed counter is no evidence of tuning: not counted, and the layer says why
    assert lv.state == "hit" and lv.warm == "0 tuned", lv
    assert lv.reasons == ["template selection(s) not observed: this torch has none of "
                          "PersistentCache.lookup (torch's counter says 2, but an FX-graph "
                          "cache hit replays it from the cold compile)"], lv.reasons
    assert notes == ["autotune: " + lv.reasons[0]]


def test_a_kernel_benchmarked_with_torchs_autotune_cache_off_is_a_miss_not_a_note() -> None:
    from types import SimpleNamespace

    from pytest_compilecache.child.tuning import stored_result
    from pytest_compilecache.layers.tuning import untunable
    from pytest_compilecache.terms import CACHE_OFF, NO_CACHE

    off = SimpleNamespace(save_cache_hook=None, inductor_meta={"autotune_local_cache": False})
    one = SimpleNamespace(save_cache_hook=None, inductor_meta={})
    assert stored_result(off) == CACHE_OFF
    assert stored_result(one) == NO_CACHE
    rec = {"why": {"k_off": CACHE_OFF, "k_one": NO_CACHE}}
    assert untunable(rec) == ["k_one"]  # only a kernel no cache could hold


def test_the_judge_names_every_kind_the_spy_counts() -> None:
    from pytest_compilecache.child.tuning import SPIES
    from pytest_compilecache.layers.tuning import KINDS

    assert list(KINDS) == list(SPIES)  # the record's kinds are the spy's
