"""The warm-start paths (--compile-cache-via), one module each, both sides of a path in
one class (`base.WarmStartPath`): the phases the controller plans and judges, and what
the phase child loads, compiles and saves. One registry, which the options, the report
and the docs derive from (--help from a copy of its summaries that a test holds to it,
so that importing the package imports no path module); a plugin or conftest.py adds a
path through the `pytest_compilecache_warm_start_paths` hook, in the controller and the
phase child alike.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Type

if TYPE_CHECKING:
    from pytest_compilecache.pathoption import PathOption
    from pytest_compilecache.paths.base import WarmStartPath

# the modules of the paths this package brings, in --help's order
BUILTIN = ("local", "mega", "precompile", "aot", "aoti", "remote", "deploy", "record", "keys",
           "shared", "other_gpu", "ranks", "replicas", "compile_once")

# --compile-cache-via's help, written out: the path modules import the judges, which
# pytest's start-up would pay for in every session (test_plugin holds these to the
# classes' `summary`). Restarted over the same cache dirs, then carried elsewhere:
LOCAL_SUMMARIES = ("local (restart over the same cache dirs)",)
CARRIED_SUMMARIES = (
    "mega (torch.compiler.save_cache_artifacts, torch 2.7+)",
    "precompile (the same with TORCH_CACHING_PRECOMPILE=1, 2.9+)",
    "aot (aot_compile + save_compiled_function, ModelCase, fullgraph)",
    "aoti (torch.export + AOTInductor package, ModelCase inference)",
    "remote (torch's Redis remote caches: a new machine with an empty disk)",
)

# the built-in paths' own options (`WarmStartPath.options`), written out for the same
# reason: --help lists them without importing a path module (test_plugin holds them to
# the classes'). A conftest's path adds its options when the conftest registers.
def builtin_options() -> Tuple["PathOption", ...]:
    from pytest_compilecache.pathoption import PathOption

    return (PathOption("redis", "HOST:PORT of the Redis server the remote path uses (default: "
                                "a private redis-server per session, emptied before each "
                                "check's cold run; your own server's existing entries may "
                                "warm a cold run)", "HOST:PORT"),)


Registry = Dict[str, Type["WarmStartPath"]]


def __getattr__(name: str) -> Any:
    """`paths.WarmStartPath`, imported when asked for: the package stays cheap to import."""
    if name == "WarmStartPath":
        from pytest_compilecache.paths.base import WarmStartPath

        return WarmStartPath
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def builtin() -> Registry:
    """The paths this package brings, by name (pure Python: no torch is imported)."""
    from pytest_compilecache.builtins import subclasses_in
    from pytest_compilecache.paths.base import WarmStartPath

    return subclasses_in(__name__, BUILTIN, WarmStartPath)


def registry(pluginmanager: Optional[Any] = None) -> Registry:
    """The built-in paths and those the hook adds; a hook's path that is not a
    WarmStartPath or reuses a name is a usage error naming it (ValueError)."""
    from pytest_compilecache.paths.base import WarmStartPath

    reg = builtin()
    if pluginmanager is None:
        return reg
    try:
        every = pluginmanager.hook.pytest_compilecache_warm_start_paths()
    except Exception as e:  # a conftest's hook that raises: named, not a traceback
        raise ValueError(f"pytest_compilecache_warm_start_paths raised {type(e).__name__}: "
                         f"{e}") from None
    for found in every:
        for cls in found or ():
            where = f"{getattr(cls, '__module__', '?')}.{getattr(cls, '__qualname__', cls)!s}"
            if not (isinstance(cls, type) and issubclass(cls, WarmStartPath)):
                raise ValueError(f"pytest_compilecache_warm_start_paths returned {where}, "
                                 f"which is not a subclass of "
                                 f"pytest_compilecache.paths.WarmStartPath")
            if not cls.name or (cls.name in reg and reg[cls.name] is not cls):
                raise ValueError(f"pytest_compilecache_warm_start_paths: {where} needs a name "
                                 f"of its own (set `name` and `via`; taken: "
                                 f"{', '.join(sorted(reg))})")
            reg[cls.name] = cls
    return reg


def selectable(reg: Registry) -> List[str]:
    """The names --compile-cache-via takes."""
    return [name for name, cls in reg.items() if cls.selectable]


def unknown_via(vias: Any, reg: Registry) -> Optional[str]:
    """The usage error of a --compile-cache-via that names a path nobody registered."""
    if all(v in reg and reg[v].selectable for v in vias):
        return None
    return (f"--compile-cache-via: {','.join(vias)!r}: the warm-start paths are "
            f"{', '.join(selectable(reg))} (comma-separated)")


def one_phase_each(found: Sequence["WarmStartPath"]) -> bool:
    """Every path a single phase (a recording of keys): its checks need one preloaded
    interpreter, not one per phase (launch/preloaded.py `narrow`)."""
    return all(len(p.phases) == 1 for p in found)


def for_settings(settings: Any, reg: Registry,
                 scenario_reg: Optional[Any] = None) -> List["WarmStartPath"]:
    """The paths the settings ask for: a scenario's that stands alone (recording, the
    deploy scenario), else each warm-start path of --compile-cache-via (default: the
    local restart alone), a scenario's path in the local restart's place
    (scenarios.path_names)."""
    from pytest_compilecache import scenarios

    on = dict(settings.scenarios)
    names = scenarios.path_names(on, settings.via, scenario_reg or scenarios.builtin())
    return [reg[name].from_settings(settings) for name in names]


def via_help() -> str:
    """--compile-cache-via's help, from the built-in paths' summaries."""
    return ("the warm-start paths checked, each with a verdict of its own (n/a where torch "
            "or the workload cannot take one): " + ", ".join(LOCAL_SUMMARIES) + "; carried "
            "to an empty cache root at another path and loaded there: "
            + ", ".join(CARRIED_SUMMARIES)
            + "; comma-separated")


def preflight(chosen: List["WarmStartPath"]) -> List[str]:
    """What the session's paths need from outside, checked before anything compiles."""
    return [line for path in chosen for line in path.preflight()]


__all__ = ["WarmStartPath", "builtin", "registry", "selectable", "for_settings", "via_help",
           "builtin_options", "preflight"]
