"""Which imported modules are installed libraries (site-packages), not the user's tree:
what a preloaded interpreter may import before it forks a phase, and what would shadow
it. Never the plugin's own (owndeps.py). Read by the forkserver, the controller and the
phase child alike, so it imports nothing of theirs.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Optional

from pytest_compilecache.owndeps import the_tests


def installed_libraries(modules: Mapping[str, Any]) -> List[str]:
    """Top-level packages among `modules` that were imported from an installed
    location (site-packages, dist-packages), not from the user's tree, nor the plugin's own."""
    return _installed(modules, set(the_tests({m.split(".")[0] for m in modules})))


# imported lazily while compiling, or ours: never learned from a phase (a compile-time
# import may touch CUDA, and the compile stack is preloaded on its own)
_NOT_LEARNED = ("torch", "triton", "pytest", "_pytest", "pluggy", "pytest_compilecache")


def installed_modules(modules: Mapping[str, Any], before: Any) -> List[str]:
    """Modules in `modules` but not in `before`, each from an installed library: what a
    phase imported lazily (transformers' model classes, for one), for the preloaded
    interpreters to import before the next fork."""
    return _installed(modules, {m for m in the_tests(set(modules) - set(before))
                                if m.split(".")[0] not in _NOT_LEARNED})


def _installed(modules: Mapping[str, Any], names: Any) -> List[str]:
    """Those of `names` (public ones) whose module in `modules` comes from site-packages."""
    import site
    import sysconfig

    dirs = {sysconfig.get_paths().get(k) for k in ("purelib", "platlib")}
    try:
        dirs.update(site.getsitepackages())
    except AttributeError:  # a virtualenv's old site.py
        pass
    roots = tuple(os.path.join(os.path.realpath(d), "") for d in dirs if d)
    return [name for name in sorted(names) if not name.startswith("_")
            and os.path.realpath(getattr(modules.get(name), "__file__", None) or "/"
                                 ).startswith(roots)]


def shadowed(entries: List[str], tops: List[str]) -> Optional[str]:
    """A preloaded package that a fresh interpreter would import from one of `entries`
    (the phase's cwd or PYTHONPATH, ahead of where it was loaded from), if any."""
    for d in entries:
        for name in tops:
            base = os.path.join(d or ".", name)
            if os.path.isdir(base) or os.path.exists(base + ".py") or any(
                    f.startswith(name + ".") and f.endswith((".so", ".pyd"))
                    for f in _listdir(d)):
                return f"{name} would be imported from {d} (preloaded from elsewhere)"
    return None


def _listdir(d: str, _seen: Dict[str, List[str]] = {}) -> List[str]:
    if d not in _seen:
        try:
            _seen[d] = os.listdir(d or ".")
        except OSError:
            _seen[d] = []
    return _seen[d]
