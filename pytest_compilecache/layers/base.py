"""A cache layer, as every part of the check sees it: its name and column labels, which
files under a check's cache root it owns, what the phase child records for it, and the
rule that judges its cold and warm records. Pure: no torch, no pytest."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple

from pytest_compilecache.model import CacheRecord, LayerConfig, LayerVerdict


@dataclass
class LayerInputs:
    """What a layer's rule reads: both phases' cache records, the warm phase's config
    of this layer, the files the cold phase wrote for it, the keys it saved."""
    cold: CacheRecord
    warm: CacheRecord
    config: Optional[LayerConfig] = None
    cold_files: List[str] = field(default_factory=list)
    saved: Set[str] = field(default_factory=set)
    precompiled: bool = False  # the warm process loaded Dynamo's precompiled frames


@dataclass
class TorchConfigs:
    """What a layer's `config` reads in the phase child: torch's version and its config
    modules (None where this version has none), built by child/probe.py."""
    version: str
    inductor: Any
    functorch: Any
    dynamo: Any
    job_id: Optional[str]
    force_disabled: bool  # TORCHINDUCTOR_FORCE_DISABLE_CACHES and the like

    def state(self, ok: bool, why: str) -> Dict[str, Any]:
        """A layer's config record: enabled, or why not (force-disabled caches first)."""
        if self.force_disabled:
            return {"enabled": False, "why": "caches force-disabled (TORCHINDUCTOR_FORCE_DISABLE_"
                                             "CACHES / TORCH_COMPILE_FORCE_DISABLE_CACHES)"}
        return {"enabled": ok, "why": None if ok else why}


class CacheLayer:
    """One layer. `heads`: the directories under TORCHINDUCTOR_CACHE_DIR it owns;
    `tops`: the cache root's own directories it owns; `suffixes`: files it owns by
    name anywhere else in Inductor's dir (after every directory claim)."""
    name = ""
    short = ""       # the terminal table's column
    short_md = ""    # the job summary's column
    keyed = False    # its entries have cache keys (the key manifest, drift)
    observed = ""    # what the phase child records for it (child/probe.py)
    heads: Tuple[str, ...] = ()
    tops: Tuple[str, ...] = ()
    suffixes: Tuple[str, ...] = ()

    def owns_top(self, parts: List[str]) -> bool:
        return parts[0] in self.tops

    def config(self, torch: TorchConfigs) -> Optional[Dict[str, Any]]:
        """In the phase child: whether this torch and its config enable the layer, and
        why not; None for a layer with no switch of its own."""
        return None

    def judge(self, inputs: LayerInputs) -> Tuple[LayerVerdict, List[str]]:
        """The layer's verdict, and notes for the check."""
        raise NotImplementedError
