"""Autotuning results: template selection (max-autotune), Triton config benchmarks and
coordinate-descent tuning, and the results they store (.best_config)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from pytest_compilecache.judge.kernels import autotune_layer
from pytest_compilecache.layers.base import CacheLayer, LayerInputs, TorchConfigs
from pytest_compilecache.model import LayerVerdict


class Autotune(CacheLayer):
    name, short, short_md = "autotune", "autotune", "autotune"
    observed = ("tuning that really ran in the phase (spied select_algorithm, "
                "CachingAutotuner benchmarks, coordinate descent), never counters an "
                "FX-graph hit replays")
    heads = ("cache",)
    suffixes = (".best_config",)

    def config(self, torch: TorchConfigs) -> Optional[Dict[str, Any]]:
        return torch.state(bool(getattr(torch.inductor, "autotune_local_cache", True)),
                           "inductor config autotune_local_cache is off")

    def judge(self, inputs: LayerInputs) -> Tuple[LayerVerdict, List[str]]:
        return autotune_layer(inputs.cold, inputs.warm, inputs.cold_files)
