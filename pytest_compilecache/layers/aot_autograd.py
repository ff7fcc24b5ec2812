"""AOTAutograd's cache: the joint forward/backward graphs, keyed."""
from __future__ import annotations

from typing import Any, Dict, Optional

from pytest_compilecache.layers.base import TorchConfigs
from pytest_compilecache.layers.keyed import KeyedLayer


class AOTAutograd(KeyedLayer):
    name, short, short_md = "aot_autograd", "aot", "AOT"
    observed = ("each lookup: its key, hit / miss / bypass and torch's reason, the key's "
                "components (AOTAutogradCache's events and key details)")
    heads = ("aotautograd",)

    def config(self, torch: TorchConfigs) -> Optional[Dict[str, Any]]:
        on = getattr(torch.functorch, "enable_autograd_cache", None)
        if on is None:
            return {"enabled": False,
                    "why": f"torch {torch.version} has no AOTAutograd cache config"}
        fx = bool(getattr(torch.inductor, "fx_graph_cache", False))
        return torch.state(bool(on) and fx, "functorch config enable_autograd_cache is off "
                                            "(TORCHINDUCTOR_AUTOGRAD_CACHE=0) or the FX cache is off")
