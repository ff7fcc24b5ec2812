"""Dynamo's PGO profile (automatic dynamic shapes): written by the cold run, read by the
warm one so that it compiles dynamic at once instead of recompiling."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from pytest_compilecache.judge.pgo import pgo_layer
from pytest_compilecache.layers.base import CacheLayer, LayerInputs, Switch, TorchConfigs
from pytest_compilecache.model import LayerVerdict

LOCAL_PGO = Switch("dynamo", "automatic_dynamic_local_pgo", "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO")


class DynamoPGO(CacheLayer):
    name, short, short_md = "dynamo_pgo", "pgo", "PGO"
    observed = ("PGO state reads and writes per graph (torch._dynamo.pgo's get/put, "
                "counted in the child), Dynamo's compiles per frame and the job id")
    heads = ("dynamo",)
    switches = (LOCAL_PGO,)

    def config(self, torch: TorchConfigs) -> Optional[Dict[str, Any]]:
        on = getattr(torch.dynamo, "automatic_dynamic_local_pgo", None)
        if on is None:
            return {"enabled": False, "why": f"torch {torch.version} has no local PGO (2.6+)"}
        forced = torch.forced()
        if forced:
            return forced
        if on and torch.job_id is None:
            return {"enabled": False, "no_job_id": True,
                    "why": "no job id: PGO state is not persisted across restarts"}
        return torch.switched_off(LOCAL_PGO, "every restart compiles a varying shape static, "
                                  "then again dynamic") or torch.on()

    def judge(self, inputs: LayerInputs) -> Tuple[LayerVerdict, List[str]]:
        return pgo_layer(inputs.cold, inputs.warm, inputs.config), []
