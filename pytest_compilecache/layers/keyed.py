"""A layer whose entries have cache keys (AOTAutograd's, the FX graph's): one rule for
both, judge/keyed.py's, over each lookup's key, state and components."""
from __future__ import annotations

from typing import List, Tuple

from pytest_compilecache.judge.keyed import keyed_layer
from pytest_compilecache.layers.base import CacheLayer, LayerInputs
from pytest_compilecache.model import LayerVerdict


class KeyedLayer(CacheLayer):
    keyed = True

    def judge(self, inputs: LayerInputs) -> Tuple[LayerVerdict, List[str]]:
        return keyed_layer(self.name, inputs.cold, inputs.warm, inputs.config, inputs.saved,
                           inputs.precompiled), []
