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


def test_a_stored_result_torch_did_not_reload_is_named() -> None:
    lv, _, _, _ = _layer("resnet18_max_autotune")
    assert lv.state == "miss" and lv.warm.startswith("6 tuned: 6 coordinate-descent"), lv
    assert any("names a config outside the kernel's list, which this torch does not reload"
               in r for r in lv.reasons), lv.reasons


# The warm runs of an H200 (torch 2.11) where torch threw a stored result away: its
# record as the spy writes it now (reason, seconds, the workload's), on the MLP record
# whose warm run tuned nothing (docs/gpu-results.md has the runs).
KERNEL = "triton_poi_fused_addmm_relu_0"


def _thrown_away(reason: str, spent: float, total: float, compiles: int = 2):
    from pytest_compilecache.layers.autotune import autotune_layer
    from pytest_compilecache.layers.kernels import Kernels
    from pytest_compilecache.layers.base import LayerInputs
    from pytest_compilecache.wire import CacheRecord

    rec = json.loads((DATA / "mlp_max_autotune.json").read_text())
    cold, warm = rec["cold"]["cache"], rec["warm"]["cache"]
    warm["tuning"]["seen"]["coordesc"] = [KERNEL]
    warm["tuning"].update(why={KERNEL: reason}, seconds={KERNEL: spent}, workload_s=total)
    warm["kernels"] = {"triton_listener": True, "triton_compiled": compiles,
                       "compiled_names": [KERNEL] * compiles}
    lv, notes = autotune_layer(cold, warm, [])
    inputs = LayerInputs(cold=CacheRecord.from_json(cold), warm=CacheRecord.from_json(warm),
                         cold_files=["triton/K/x.cubin"])
    klv, knotes = Kernels().judge(inputs)
    files = [f"triton/K/{KERNEL}.cubin", f"triton/K/__grp__{KERNEL}.json"]
    Kernels().warm_wrote(klv, files, inputs)
    return lv, notes, klv, knotes


@pytest.mark.parametrize("reason", ["LOST_MARK", "SCALED_DECLINED", "NO_CACHE"])
def test_a_result_torch_throws_away_at_little_cost_is_a_note_in_both_layers(reason) -> None:
    """One MLP kernel whose coordinate-descent mark torch 2.11 lost: 0.52 s of a 2.3 s warm
    run, in one run of three (which config wins is timing noise): autotune and kernels
    hit, each with a note naming torch's behaviour and the cost."""
    from pytest_compilecache import terms

    lv, notes, klv, knotes = _thrown_away(getattr(terms, reason), 0.52, 2.3)
    assert (lv.state, klv.state) == ("hit", "hit"), (lv, klv)
    assert "torch's behaviour, not your setup; their tuning took 0.52 s of the warm run's " \
        "2.3 s" in notes[0] and getattr(terms, reason) in notes[0], notes
    assert knotes and "2 Triton compile(s) were torch re-tuning 1 kernel(s)" in knotes[0]


def test_a_result_torch_throws_away_at_a_cold_starts_cost_fails() -> None:
    """resnet18 under max-autotune on torch 2.11: 8-11 s of a 10-14 s warm run re-tuning
    coordinate-descent results torch loaded and threw away: the restart is not warm."""
    from pytest_compilecache.terms import LOST_MARK

    lv, notes, klv, _ = _thrown_away(LOST_MARK, 7.28, 10.7)
    assert (lv.state, klv.state) == ("miss", "miss"), (lv, klv)
    assert "a third of the warm run or more" in lv.reasons[0] and LOST_MARK in lv.reasons[0]
    assert "the warm run compiled 2 Triton kernel(s) from source" in klv.reasons


def test_tuning_that_a_stored_result_should_have_spared_fails_whatever_it_cost() -> None:
    """A real regression (the result was there and matched, or was never stored) fails
    at any cost: only what torch itself throws away is weighed."""
    from pytest_compilecache.terms import IGNORED, NOT_STORED

    for reason in (IGNORED, NOT_STORED):
        lv, _, klv, _ = _thrown_away(reason, 0.05, 2.3)
        assert (lv.state, klv.state) == ("miss", "miss"), (reason, lv, klv)


class _Cache:
    """An AutotuneCache as the spy sees it: its local cache and the configs' hash."""
    def __init__(self, data):
        self.configs_hash = "h"
        self.local_cache = ({"k.best_config": data} if data else {}, "k.best_config")

    def save(self, *args: object) -> None:
        pass


def _tuner(data, configs=()):
    from types import SimpleNamespace

    cache = _Cache(data)
    return SimpleNamespace(save_cache_hook=cache.save, configs=list(configs),
                           inductor_meta={}), cache


def test_the_spy_names_what_torchs_own_read_threw_away() -> None:
    """child/tuning.stored_result reads the stored result and what torch's read of it
    (AutotuneCache.read_best, spied) returned."""
    from types import SimpleNamespace

    from pytest_compilecache.child.tuning import (READ_DECLINED_OFF, READ_LOADED,
                                                  read_outcome, stored_result)
    from pytest_compilecache.terms import (IGNORED, LOST_MARK, NOT_RELOADED, NOT_STORED,
                                           OTHER_LIST, SCALED_DECLINED)

    listed = SimpleNamespace(kwargs={"XBLOCK": 64, "R0_BLOCK": 2048}, num_warps=8, num_stages=1)
    scaled = {"XBLOCK": 64, "R0_BLOCK": 1024, "num_warps": 8, "num_stages": 1,
              "configs_hash": "h"}
    tuner, cache = _tuner(scaled)
    # torch's read declined a config outside the kernel's list: RBLOCK scaling's
    assert read_outcome(cache, None, [listed]) == READ_DECLINED_OFF
    assert stored_result(tuner, {"k.best_config": READ_DECLINED_OFF}) == SCALED_DECLINED
    # a coordinate-descent result torch loaded, then tuned again: the lost mark
    coord = {**scaled, "found_by_coordesc": True}
    tuner, cache = _tuner(coord)
    assert stored_result(tuner, {"k.best_config": READ_LOADED}, coordesc=True) == LOST_MARK
    # without torch's read recorded (another torch), the old reading stands
    assert stored_result(tuner, {}, coordesc=True) == NOT_RELOADED
    # a listed result torch benchmarked anyway, one never stored, one for other configs
    tuner, _ = _tuner({**scaled, "R0_BLOCK": 2048}, [listed])
    assert stored_result(tuner, {"k.best_config": READ_LOADED}) == IGNORED
    assert stored_result(_tuner(None)[0], {}) == NOT_STORED
    assert stored_result(_tuner({**scaled, "configs_hash": "g"})[0], {}) == OTHER_LIST


def test_a_kernel_torch_keeps_no_result_for_is_a_note_not_a_miss() -> None:
    lv, notes, _, _ = _layer("convnext_tiny_training")
    assert lv.state == "hit" and lv.warm.startswith("1 tuned: 1 config benchmark(s)"), lv
    assert len(notes) == 1 and "torch tunes at every start" in notes[0], notes
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
