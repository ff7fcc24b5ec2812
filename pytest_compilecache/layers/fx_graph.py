"""Inductor's FX-graph cache: the compiled graphs (their output code and kernels'
bundle), keyed."""
from __future__ import annotations

from typing import List, Tuple

from pytest_compilecache.judge.keyed import keyed_layer
from pytest_compilecache.layers.base import CacheLayer, LayerInputs
from pytest_compilecache.model import LayerVerdict


class FxGraph(CacheLayer):
    name, short, short_md = "fx_graph", "fx", "FX"
    keyed = True
    observed = ("each lookup: its key, hit / miss / bypass and torch's reason, the key's "
                "components (FxGraphCache's events and key details)")
    heads = ("fxgraph",)
    suffixes = (".py",)  # generated wrapper code: written anew only when FX compiled

    def judge(self, inputs: LayerInputs) -> Tuple[LayerVerdict, List[str]]:
        return keyed_layer(self.name, inputs.cold, inputs.warm, inputs.config, inputs.saved,
                           inputs.precompiled), []
