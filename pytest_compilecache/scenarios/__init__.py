"""The scenarios (deploy, keys-only, manifest-only, shared variants, another GPU), one
module each (`base.Scenario`): the option that switches one on, what it cannot run with,
and where its warm-start path stands in. One registry, which the options, the settings
and the path plan derive from; a plugin or conftest.py adds a scenario (and the path it
runs) through the `pytest_compilecache_scenarios` hook. No module here imports a path."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from pytest_compilecache.scenarios.base import ALONE, FOR_LOCAL, Scenario

# the scenario modules of this package; the first one switched on of those that stand
# alone is the session's path (keys-only before manifest-only: it records them faster)
BUILTIN = ("keys", "record", "deploy", "shared", "other_gpu", "ranks", "replicas",
           "compile_once")

Registry = Dict[str, Scenario]


def builtin() -> Registry:
    from pytest_compilecache.builtins import subclasses_in

    return {name: cls() for name, cls in subclasses_in(__name__, BUILTIN, Scenario).items()}


def from_hook(found: Any, reg: Registry, where: str) -> None:
    """Add the scenarios one hook call returned; one that is no Scenario subclass or
    reuses a name or a switch is a usage error naming it (ValueError)."""
    for cls in found or ():
        named = f"{getattr(cls, '__module__', '?')}.{getattr(cls, '__qualname__', cls)!s}"
        if not (isinstance(cls, type) and issubclass(cls, Scenario)):
            raise ValueError(f"{where} returned {named}, which is not a subclass of "
                             f"pytest_compilecache.scenarios.base.Scenario")
        taken = {s.switch for s in reg.values()}
        if not cls.name or not cls.switch or cls.name in reg or cls.switch in taken:
            raise ValueError(f"{where}: {named} needs a name and a switch of its own "
                             f"(taken: {', '.join(sorted(reg))})")
        reg[cls.name] = cls()


def registry(pluginmanager: Optional[Any] = None) -> Registry:
    """The built-in scenarios and those the hook adds."""
    reg = builtin()
    if pluginmanager is None:
        return reg
    hook = "pytest_compilecache_scenarios"
    try:
        every = pluginmanager.hook.pytest_compilecache_scenarios()
    except Exception as e:  # a conftest's hook that raises: named, not a traceback
        raise ValueError(f"{hook} raised {type(e).__name__}: {e}") from None
    for found in every:
        from_hook(found, reg, hook)
    return reg


def usage_error(on: Mapping[str, Any], values: Mapping[str, Any],
                reg: Registry) -> Optional[str]:
    """The first scenario switched on that cannot run with the others or the settings."""
    for name in on:
        problem = reg[name].usage_error(on, values)
        if problem:
            return problem
    return None


def switched_on(settings: Any, reg: Registry) -> List[Scenario]:
    """The scenarios a session's settings switch on."""
    return [s for name, s in reg.items() if settings.scenario(name)]


def path_names(on: Mapping[str, Any], via: Any, reg: Registry) -> List[str]:
    """The warm-start paths a session runs: a scenario that stands alone, else each of
    --compile-cache-via's, a scenario that stands in for the local restart first."""
    switched = [reg[name] for name in reg if name in on]
    alone = [s.name for s in switched if s.stands_in == ALONE]
    if alone:
        return alone[:1]
    vias = list(via)
    instead = [s.name for s in switched if s.stands_in == FOR_LOCAL]
    if instead:
        vias = instead[:1] + [v for v in vias if v != "local"]
    return vias


__all__ = ["Scenario", "builtin", "registry", "usage_error", "switched_on", "path_names"]
