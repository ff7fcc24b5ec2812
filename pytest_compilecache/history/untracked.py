"""Which untracked files of the work tree a session reads: those make the tree dirty.

A key manifest is filed under its commit, and a clean commit's manifest must hold only
what that commit builds. A never-committed root conftest.py that set an Inductor option
changed a run's keys, and since git counted the tree clean (untracked files were not
looked at) those keys were merged into the clean commit's manifest: later drift checks
and bisect compared against a setting the commit never had. So an untracked file that
pytest reads (a conftest.py, an ini file) or that the session can import (a module
under a directory on the import path, or one loaded already) makes the tree dirty and
is named in the manifest. One that nothing reads (notes.txt, a .gitignored build
output nothing imports) leaves the tree clean.

Installed packages are the environment, not the tree: a virtualenv inside the checkout
(the README's `.venv`, not ignored by git) made the first manifest `<sha>-dirty.json`,
listing 962 files, torch among them. Any file under a site-packages, a Python prefix or
a directory holding pyvenv.cfg is never the tree's, wherever the venv lives. And git's
ignore rules do not make a file the session reads clean: a conftest.py kept out of git
by .git/info/exclude changed Inductor settings and wrote its keys to the clean commit's
manifest. So the files the session did read (`read_files`) are asked of git one by one.

Pure: the caller passes the import path and the loaded modules' files. No pytest.
"""
from __future__ import annotations

import functools
import importlib.machinery
import os
import sys
from pathlib import Path
from typing import Iterable, List, Optional

# what pytest itself reads: its conftests and the ini files it looks for a config in
PYTEST_READS = frozenset({"conftest.py", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg",
                          "pyproject.toml"})
IMPORTABLE = frozenset(importlib.machinery.all_suffixes())


ENVIRONMENT_DIRS = frozenset({"site-packages", "dist-packages"})


class SessionReads:
    """Whether the session reads a file: pytest's conftests and ini files, the files of
    `loaded` modules, and importable files under a `search_path` directory (namespace
    packages make every directory below one importable). The environment's files
    (`prefixes`, any site-packages, any virtualenv) are no project's, and what the
    plugin writes (`own`: the cache roots, whose Inductor output is .py files, and the
    store) is not the project's code."""

    def __init__(self, search_path: Iterable[str], loaded: Iterable[Optional[str]],
                 prefixes: Iterable[str] = (sys.prefix, sys.base_prefix),
                 own: Iterable[Optional[str]] = ()) -> None:
        self.mine = [os.path.realpath(p) for p in own if p]
        self.envs = [os.path.realpath(p) for p in prefixes if p]
        self.roots = [r for r in (os.path.realpath(p or os.curdir) for p in search_path)
                      if os.path.isdir(r) and not self.environment(r)]
        self.files = {os.path.realpath(f) for f in loaded if f}

    def __call__(self, path: Path) -> bool:
        real = os.path.realpath(path)
        if self.environment(real) or any(_under(real, d) for d in self.mine):
            return False
        if path.name in PYTEST_READS or real in self.files:
            return True
        return path.suffix in IMPORTABLE and any(_under(real, r) for r in self.roots)

    def environment(self, real: str) -> bool:
        """An installed package's file, or a virtualenv's: the environment's."""
        if any(_under(real, e) for e in self.envs):
            return True
        return not ENVIRONMENT_DIRS.isdisjoint(Path(real).parts) or _in_venv(
            os.path.dirname(real))

    def read_files(self, root: Path) -> List[str]:
        """The files under `root` the session did read, relative to it: the loaded
        modules' sources, and pytest's conftest and ini files beside its conftests and
        at `root` (what makes a tree dirty whether or not git ignores it)."""
        top = os.path.realpath(root)
        dirs = {top} | {os.path.dirname(f) for f in self.files
                        if os.path.basename(f) == "conftest.py"}
        found = {os.path.join(d, n) for d in dirs for n in PYTEST_READS} | {
            f for f in self.files if f.endswith(".py")}
        return sorted(os.path.relpath(f, top) for f in found
                      if _under(f, top) and os.path.isfile(f) and self(Path(f)))


def session_reads(search_path: Iterable[str], loaded: Iterable[Optional[str]],
                  prefixes: Iterable[str] = (sys.prefix, sys.base_prefix),
                  own: Iterable[Optional[str]] = ()) -> SessionReads:
    return SessionReads(search_path, loaded, prefixes, own)


@functools.lru_cache(maxsize=4096)
def _in_venv(directory: str) -> bool:
    """`directory` or one above it holds pyvenv.cfg: a virtualenv's."""
    parent = os.path.dirname(directory)
    if os.path.isfile(os.path.join(directory, "pyvenv.cfg")):
        return True
    return parent != directory and _in_venv(parent)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def this_session(own: Iterable[Optional[str]] = ()) -> SessionReads:
    """session_reads() of this process: its sys.path and loaded modules."""
    return session_reads(list(sys.path), [getattr(m, "__file__", None)
                                          for m in list(sys.modules.values())], own=own)
