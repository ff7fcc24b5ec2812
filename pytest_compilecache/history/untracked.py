"""Which untracked files of the work tree a session reads: those make the tree dirty.

A key manifest is filed under its commit, and a clean commit's manifest must hold only
what that commit builds. A never-committed root conftest.py that set an Inductor option
changed a run's keys, and since git counted the tree clean (untracked files were not
looked at) those keys were merged into the clean commit's manifest: later drift checks
and bisect compared against a setting the commit never had. So an untracked file that
pytest reads (a conftest.py, an ini file) or that the session can import (a module
under a directory on the import path, or one loaded already) makes the tree dirty and
is named in the manifest. One that nothing reads (notes.txt, a .gitignored build
output: git does not list those as untracked) leaves the tree clean.

Pure: the caller passes the import path and the loaded modules' files. No pytest.
"""
from __future__ import annotations

import importlib.machinery
import os
import sys
from pathlib import Path
from typing import Callable, Iterable, Optional

# what pytest itself reads: its conftests and the ini files it looks for a config in
PYTEST_READS = frozenset({"conftest.py", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg",
                          "pyproject.toml"})
IMPORTABLE = frozenset(importlib.machinery.all_suffixes())


def session_reads(search_path: Iterable[str], loaded: Iterable[Optional[str]],
                  prefixes: Iterable[str] = (sys.prefix, sys.base_prefix),
                  own: Iterable[Optional[str]] = ()) -> Callable[[Path], bool]:
    """A test of whether the session reads a file: pytest's conftests and ini files,
    the files of `loaded` modules, and importable files under a `search_path`
    directory (namespace packages make every directory below one importable). The
    environment's own directories (`prefixes`: a virtualenv inside the repository) are
    no import path of the project's, and what the plugin writes (`own`: the cache roots,
    whose Inductor output is .py files, and the store) is not the project's code."""
    mine = [os.path.realpath(p) for p in own if p]
    envs = [os.path.realpath(p) for p in prefixes if p]
    roots = [r for r in (os.path.realpath(p or os.curdir) for p in search_path)
             if os.path.isdir(r) and not any(_under(r, e) for e in envs)]
    files = {os.path.realpath(f) for f in loaded if f}

    def reads(path: Path) -> bool:
        real = os.path.realpath(path)
        if any(_under(real, d) for d in mine):
            return False
        if path.name in PYTEST_READS or real in files:
            return True
        return path.suffix in IMPORTABLE and any(_under(real, r) for r in roots)
    return reads


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def this_session(own: Iterable[Optional[str]] = ()) -> Callable[[Path], bool]:
    """session_reads() of this process: its sys.path and loaded modules."""
    return session_reads(list(sys.path), [getattr(m, "__file__", None)
                                          for m in list(sys.modules.values())], own=own)
