"""AOTAutograd's cache: the joint forward/backward graphs, keyed."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from pytest_compilecache.layers.base import Switch, TorchConfigs
from pytest_compilecache.layers.fx_graph import FX_GRAPH_CACHE
from pytest_compilecache.layers.keyed import KeyedLayer
from pytest_compilecache.wire import CacheRecord

AUTOGRAD_CACHE = Switch("functorch", "enable_autograd_cache", "TORCHINDUCTOR_AUTOGRAD_CACHE")


class AOTAutograd(KeyedLayer):
    name, short, short_md = "aot_autograd", "aot", "AOT"
    observed = ("each lookup: its key, hit / miss / bypass and torch's reason, the key's "
                "components (AOTAutogradCache's events and key details)")
    heads = ("aotautograd",)
    switches = (AUTOGRAD_CACHE, FX_GRAPH_CACHE)

    def config(self, torch: TorchConfigs) -> Optional[Dict[str, Any]]:
        on = getattr(torch.functorch, "enable_autograd_cache", None)
        if on is None:
            return {"enabled": False,
                    "why": f"torch {torch.version} has no AOTAutograd cache config"}
        return (torch.forced() or torch.switched_off(
            AUTOGRAD_CACHE, "every restart traces its forward and backward graphs again")
            or self._without_fx(torch) or torch.on())

    def load_compiles(self, warm: CacheRecord) -> List[str]:
        n = warm.counter("aot_autograd", "autograd_cache_miss")
        return [f"{n} AOTAutograd cache miss(es)"] if n else []

    @staticmethod
    def _without_fx(torch: TorchConfigs) -> Optional[Dict[str, Any]]:
        """torch bypasses this cache while the FX graph cache is off ("FX graph cache is
        not enabled"): off, naming that setting, not this layer's own switch."""
        fx = torch.off(FX_GRAPH_CACHE)
        if fx is None:
            return None
        return {"enabled": False, "off": True, "setting": fx,
                "why": f"off because the FX graph cache is off ({fx}, "
                       f"{torch.where(FX_GRAPH_CACHE)}): AOTAutograd's cache keeps a graph only "
                       f"with its FX graph, whatever {AUTOGRAD_CACHE.setting} says"}
