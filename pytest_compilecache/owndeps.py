"""The plugin's own dependencies, and what the plugin's own imports of them brought in.

The preloaded interpreters (launch/preloaded.py) import the installed libraries the
controller has imported, as the tests' libraries. The plugin's own imports are not the
tests': GitPython (imported to learn the commit a key manifest belongs to) copies the whole
environment at import, so preloading it made every phase whose environment differs in any
variable (a conftest's HF_HOME) start in a fresh interpreter. What the plugin alone
brings is never preloaded for the tests, and never counted as an environment read.
Imports nothing of the plugin's: the controller, the forkserver and the phase read it.
"""
from __future__ import annotations

import functools
import importlib
import re
import sys
from typing import Any, FrozenSet, Iterable, List, Set

DISTRIBUTION = "pytest-compilecache"
PACKAGE = "pytest_compilecache"
# the tests' own frameworks: whatever they need, the tests have without the plugin
_SHARED = ("torch", "pytest")

# top-level modules that an `import_own` brought into this process
_brought: Set[str] = set()


def import_own(name: str) -> Any:
    """Import `name` for the plugin's own use, noting which top-level modules the import
    brought in. One that was imported before (by a conftest, say) is not noted: the tests
    use it too."""
    before = _tops(sys.modules)
    try:
        return importlib.import_module(name)
    finally:
        _brought.update(_tops(sys.modules) - before)


def the_tests(names: Iterable[str]) -> List[str]:
    """`names` (modules) less the plugin's own: its package, and the modules of its own
    dependencies (`plugin_only_modules`) that its own imports brought in. Watching the
    plugin's imports, not the dependency list alone, keeps a library the tests imported
    first; one they import after the plugin did is invisible here, and a phase that
    imports it says so (launch/libraries.installed_modules: the phase imports no
    dependency of the plugin's itself)."""
    own = plugin_only_modules() & _brought if _brought else frozenset()
    return [n for n in names if n.split(".")[0] != PACKAGE and n.split(".")[0] not in own]


@functools.lru_cache(maxsize=None)
def plugin_only_modules() -> FrozenSet[str]:
    """Top-level modules that only the plugin brings: this package and those of its
    distribution's requirements, transitively (gitpython, gitdb, smmap), less torch,
    pytest and all that they need (the tests have those anyway: filelock is torch's)."""
    mine = _closure(_requirements(DISTRIBUTION))
    return frozenset({PACKAGE}.union(*(_top_level(d) for d in mine - _closure(_SHARED))))


def _tops(modules: Iterable[str]) -> Set[str]:
    return {m.split(".")[0] for m in modules}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _closure(names: Iterable[str]) -> Set[str]:
    """`names` and every installed distribution they require, transitively (canonical)."""
    seen: Set[str] = set()
    todo = [_canonical(n) for n in names]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += [_canonical(n) for n in _requirements(name)]
    return seen


def _requirements(name: str) -> List[str]:
    """The distributions `name` requires here (not for an extra; markers evaluated where
    `packaging`, pytest's own dependency, can); none where it is not installed."""
    from importlib import metadata

    try:
        lines = metadata.distribution(name).requires or []
    except metadata.PackageNotFoundError:
        return []
    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:
        return [m.group(0) for line in lines if "extra" not in line
                for m in [re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line)] if m]
    found = []
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            found.append(req.name)
    return found


def _top_level(name: str) -> Set[str]:
    """The top-level modules an installed distribution provides (top_level.txt, else its
    file list)."""
    from importlib import metadata

    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return set()
    listed = dist.read_text("top_level.txt")
    if listed:
        return {line.strip() for line in listed.splitlines() if line.strip()}
    tops = set()
    for f in dist.files or []:
        first = f.parts[0]
        if first in ("..", "__pycache__") or first.endswith((".dist-info", ".egg-info", ".data")):
            continue
        if len(f.parts) > 1:
            tops.add(first)
        elif first.endswith((".py", ".so", ".pyd")):
            tops.add(first.split(".")[0])
    return tops
