"""Dynamo's PGO profile (automatic dynamic shapes): written by the cold run, read by the
warm one so that it compiles dynamic at once instead of recompiling."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from pytest_compilecache.judge.pgo import pgo_layer
from pytest_compilecache.layers.base import CacheLayer, LayerInputs, TorchConfigs
from pytest_compilecache.model import LayerVerdict


class DynamoPGO(CacheLayer):
    name, short, short_md = "dynamo_pgo", "pgo", "PGO"
    observed = ("PGO state reads and writes per graph (torch._dynamo.pgo's get/put, "
                "counted in the child), Dynamo's compiles per frame and the job id")
    heads = ("dynamo",)

    def config(self, torch: TorchConfigs) -> Optional[Dict[str, Any]]:
        on = getattr(torch.dynamo, "automatic_dynamic_local_pgo", None)
        if on is None:
            return {"enabled": False, "why": f"torch {torch.version} has no local PGO (2.6+)"}
        if on and not torch.force_disabled and torch.job_id is None:
            return {"enabled": False, "no_job_id": True,
                    "why": "no job id: PGO state is not persisted across restarts"}
        return torch.state(bool(on), "dynamo config automatic_dynamic_local_pgo "
                                     "is off (TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO=0)")

    def judge(self, inputs: LayerInputs) -> Tuple[LayerVerdict, List[str]]:
        return pgo_layer(inputs.cold, inputs.warm, inputs.config), []
