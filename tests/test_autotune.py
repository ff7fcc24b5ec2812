"""The autotune layer counts tuning that really ran in a phase process, never the
counters torch replays from an FX-graph cache hit (`counters["inductor"] +=
graph.counter_deltas`).

- A real CPU session: freezing + max-autotune selects a C++ GEMM template by benchmarking
  (AlgorithmSelectorCache); the warm process finds the choice in the local autotune cache
  and benchmarks nothing.
- Recorded GPU phases (tests/data/autotune_gpu/, see its README): an MLP under
  `max-autotune-no-cudagraphs` on an H100, whose warm FX hit replayed
  `select_algorithm_autotune` while nothing was tuned, and the same MLP with its
  `.best_config` files deleted between the phases, which really tuned again.
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
