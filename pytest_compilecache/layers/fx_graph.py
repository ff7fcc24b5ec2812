"""Inductor's FX-graph cache: the compiled graphs (their output code and kernels'
bundle), keyed."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from pytest_compilecache.layers.base import Switch, TorchConfigs
from pytest_compilecache.layers.keyed import KeyedLayer
from pytest_compilecache.wire import CacheRecord

FX_GRAPH_CACHE = Switch("inductor", "fx_graph_cache", "TORCHINDUCTOR_FX_GRAPH_CACHE")


class FxGraph(KeyedLayer):
    name, short, short_md = "fx_graph", "fx", "FX"
    observed = ("each lookup: its key, hit / miss / bypass and torch's reason, the key's "
                "components (FxGraphCache's events and key details)")
    heads = ("fxgraph",)
    suffixes = (".py",)  # generated wrapper code: written anew only when FX compiled
    switches = (FX_GRAPH_CACHE,)

    def config(self, torch: TorchConfigs) -> Optional[Dict[str, Any]]:
        return torch.forced() or torch.switched_off(
            FX_GRAPH_CACHE, "every restart compiles its FX graphs, and AOTAutograd's with them, "
                            "again") or torch.on()

    def load_compiles(self, warm: CacheRecord) -> List[str]:
        n = warm.counter("inductor", "fxgraph_cache_miss")
        return [f"{n} FX graph cache miss(es)"] if n else []
