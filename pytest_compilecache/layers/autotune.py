"""Autotuning results: template selection (max-autotune), Triton config benchmarks and
coordinate-descent tuning, and the results they store (.best_config)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from pytest_compilecache.judge.kernels import autotune_layer
from pytest_compilecache.layers.base import CacheLayer, LayerInputs, Switch, TorchConfigs
from pytest_compilecache.model import LayerVerdict

LOCAL_CACHE = Switch("inductor", "autotune_local_cache")


class Autotune(CacheLayer):
    name, short, short_md = "autotune", "autotune", "autotune"
    observed = ("tuning that really ran in the phase (spied select_algorithm, "
                "CachingAutotuner benchmarks, coordinate descent), never counters an "
                "FX-graph hit replays")
    heads = ("cache",)
    suffixes = (".best_config",)
    switches = (LOCAL_CACHE,)

    def config(self, torch: TorchConfigs) -> Optional[Dict[str, Any]]:
        return torch.forced() or torch.switched_off(
            LOCAL_CACHE, "every restart benchmarks its kernel choices again") or torch.on()

    def judge(self, inputs: LayerInputs) -> Tuple[LayerVerdict, List[str]]:
        """Switched off, the layer is `off` only where tuning ran: a workload that tunes
        nothing (most on CPU) loses nothing by it."""
        lv, notes = autotune_layer(inputs.cold, inputs.warm, inputs.cold_files)
        cfg = inputs.config
        if cfg is not None and cfg.off and lv.state != "n/a":
            lv.state, lv.reasons, lv.setting = "off", [cfg.why or "switched off"], cfg.setting
        return lv, notes
