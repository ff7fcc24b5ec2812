"""The cache layers a warm start goes through, one module each behind `base.CacheLayer`
(name, column labels, the files it owns, what the child records for it, its rule and
what the files a warm run wrote for it mean), in one registry: the report's columns, the
key manifest's keyed layers, the verdict's layers and the attribution of a cache root's
files all derive from it. Read the names below through the module (`layers.LAYERS`), not
by value at import: `register` rebinds them.
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from pytest_compilecache.layers.aot_autograd import AOTAutograd
from pytest_compilecache.layers.autotune import Autotune
from pytest_compilecache.layers.base import CacheLayer, LayerInputs
from pytest_compilecache.layers.fx_graph import FxGraph
from pytest_compilecache.layers.kernels import Kernels
from pytest_compilecache.layers.pgo import DynamoPGO

# in the report's order, which is also the order in which layers claim files (`layer_of`)
REGISTRY: Tuple[CacheLayer, ...] = ()
LAYERS: Tuple[str, ...] = ()
KEYED: Tuple[str, ...] = ()
SHORT: Dict[str, str] = {}
SHORT_MD: Dict[str, str] = {}


def use(registry: Sequence[CacheLayer]) -> None:
    """Make `registry` the layers, in the report's order, and every name derived from it."""
    global REGISTRY, LAYERS, KEYED, SHORT, SHORT_MD
    names = [layer.name for layer in registry]
    if len(set(names)) != len(names) or "other" in names:
        raise ValueError(f"cache layer names must be unique and not 'other': {names}")
    sections = [layer.section_key for layer in registry if layer.observer]
    taken = {"wall_s", "counters", "graphs", "recompile_reasons", "dynamo", "layer_config",
             "sections"}  # the cache record's own keys (wire.CacheRecord)
    if len(set(sections)) != len(sections) or taken & set(sections):
        raise ValueError(f"cache layers' record sections must be unique and not one of "
                         f"{sorted(taken)}: {sections}")
    REGISTRY = tuple(registry)
    LAYERS = tuple(names)
    KEYED = tuple(layer.name for layer in REGISTRY if layer.keyed)
    SHORT = {layer.name: layer.short for layer in REGISTRY}
    SHORT_MD = {layer.name: layer.short_md for layer in REGISTRY}


def register(layer: CacheLayer) -> None:
    """Add a cache layer after the others: the last column of the report, the last to
    claim a cache root's files."""
    use(REGISTRY + (layer,))


use((DynamoPGO(), AOTAutograd(), FxGraph(), Kernels(), Autotune()))


def layer_of(path: str) -> str:
    """The layer that wrote `path` (a cache root's relative path: `inductor/...`,
    `triton/...`, `tmp/...`), or "other": the cache root's own directories first, then
    Inductor's directories, then file names."""
    parts = path.split("/")
    for layer in REGISTRY:
        if layer.owns_top(parts):
            return layer.name
    if parts[0] == "tmp" or len(parts) < 2:
        return "other"
    for layer in REGISTRY:
        if parts[1] in layer.heads:
            return layer.name
    for layer in REGISTRY:
        if layer.suffixes and parts[-1].endswith(layer.suffixes):
            return layer.name
    return "other"


def by_layer(paths: Iterable[str]) -> Dict[str, List[str]]:
    out: Dict[str, List[str]] = {}
    for p in paths:
        out.setdefault(layer_of(p), []).append(p)
    return out


def unknown_layers(names: Sequence[str], known: Sequence[str]) -> Optional[str]:
    """What is wrong with a list of layers to accept, or None."""
    wrong = [n for n in names if n not in known]
    if not wrong:
        return None
    return (f"{', '.join(map(repr, wrong))}: not a cache layer (the layers are "
            f"{', '.join(known)})")


__all__ = ["REGISTRY", "LAYERS", "KEYED", "SHORT", "SHORT_MD", "CacheLayer", "LayerInputs",
           "layer_of", "by_layer", "register", "use", "unknown_layers"]
