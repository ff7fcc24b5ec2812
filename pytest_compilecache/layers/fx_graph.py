"""Inductor's FX-graph cache: the compiled graphs (their output code and kernels'
bundle), keyed."""
from __future__ import annotations

from typing import Any, Dict, Optional

from pytest_compilecache.layers.base import TorchConfigs
from pytest_compilecache.layers.keyed import KeyedLayer


class FxGraph(KeyedLayer):
    name, short, short_md = "fx_graph", "fx", "FX"
    observed = ("each lookup: its key, hit / miss / bypass and torch's reason, the key's "
                "components (FxGraphCache's events and key details)")
    heads = ("fxgraph",)
    suffixes = (".py",)  # generated wrapper code: written anew only when FX compiled

    def config(self, torch: TorchConfigs) -> Optional[Dict[str, Any]]:
        return torch.state(bool(getattr(torch.inductor, "fx_graph_cache", False)),
                           "inductor config fx_graph_cache is off (TORCHINDUCTOR_FX_GRAPH_CACHE=0)")
