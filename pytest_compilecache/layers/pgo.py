"""Dynamo's PGO profile (automatic dynamic shapes): written by the cold run, read by the
warm one so that it compiles dynamic at once instead of recompiling."""
from __future__ import annotations

from typing import List, Tuple

from pytest_compilecache.judge.pgo import pgo_layer
from pytest_compilecache.layers.base import CacheLayer, LayerInputs
from pytest_compilecache.model import LayerVerdict


class DynamoPGO(CacheLayer):
    name, short, short_md = "dynamo_pgo", "pgo", "PGO"
    observed = ("PGO state reads and writes per graph (torch._dynamo.pgo's get/put, "
                "counted in the child), Dynamo's compiles per frame and the job id")
    heads = ("dynamo",)

    def judge(self, inputs: LayerInputs) -> Tuple[LayerVerdict, List[str]]:
        return pgo_layer(inputs.cold, inputs.warm, inputs.config), []
