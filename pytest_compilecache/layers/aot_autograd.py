"""AOTAutograd's cache: the joint forward/backward graphs, keyed."""
from __future__ import annotations

from typing import List, Tuple

from pytest_compilecache.judge.keyed import keyed_layer
from pytest_compilecache.layers.base import CacheLayer, LayerInputs
from pytest_compilecache.model import LayerVerdict


class AOTAutograd(CacheLayer):
    name, short, short_md = "aot_autograd", "aot", "AOT"
    keyed = True
    observed = ("each lookup: its key, hit / miss / bypass and torch's reason, the key's "
                "components (AOTAutogradCache's events and key details)")
    heads = ("aotautograd",)

    def judge(self, inputs: LayerInputs) -> Tuple[LayerVerdict, List[str]]:
        return keyed_layer(self.name, inputs.cold, inputs.warm, inputs.config, inputs.saved,
                           inputs.precompiled), []
