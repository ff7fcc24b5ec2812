"""What the preloaded launcher keeps between sessions (`--compile-cache-launcher-state`),
so that a session's preloaded interpreters are ready sooner; only speed depends on it,
and deleting the directory loses nothing else.

- `preload/<key>.json`: the installed libraries the last session preloaded for its
  tests (those the test modules imported, and those a phase imported lazily:
  torchvision, transformers' model modules), per interpreter, rootdir and selection
  (the command's paths, `-k` and `-m`). The next session's interpreters import them as
  they start, instead of waiting for collection, and a cold phase no longer imports
  them itself. Per selection: a session's first fork waits for its interpreter's
  preloads, and one of another selection's libraries (`pytest -k bert` after `-k
  resnet`) kept resnet18's cold phase waiting 3.3-4.3 s on an H200 for transformers,
  which it never imports. At most `_LISTS` lists.
- `bytecode/`: where Python writes no bytecode (`PYTHONDONTWRITEBYTECODE`, as in many
  container images) and the installed packages ship none, every interpreter compiles
  torch's sources again at each import (a preloaded interpreter's start, torch and its
  compile stack: 13.0-14.8 s on an H100 machine, torch 2.11; 4.5-5.3 s from bytecode). The
  preloaded interpreters, and only they, keep the bytecode of what they import here
  (`sys.pycache_prefix`); a forked phase gets the interpreter's own settings back before
  pytest starts, so what it imports later is read, compiled or written as in a restart.
  Where torch's bytecode (and its compile stack's) was installed with it, it is read
  where it is and nothing is kept here (`finds_bytecode`).
No pytest, no torch: the forkserver reads it too.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import sys
from pathlib import Path
from typing import List, Optional, Sequence

_LISTS = 64  # the newest preload lists kept (one per interpreter, rootdir and selection)


def default_dir() -> Path:
    """$XDG_CACHE_HOME/pytest-compilecache, else ~/.cache/pytest-compilecache."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pytest-compilecache"


class LauncherState:
    """The launcher's directory; every failure to read or write it is silent (speed)."""

    def __init__(self, path: Path, rootdir: str, selection: Sequence[str] = ()) -> None:
        # resolved once: what is checked is what is read (a symlink re-pointed later
        # changes nothing)
        self.path = Path(os.path.realpath(path))
        key = "\n".join([os.path.realpath(sys.executable), os.path.realpath(rootdir),
                         *selection])
        self.list_path = self.path / "preload" / (
            hashlib.sha256(key.encode()).hexdigest()[:16] + ".json")

    @classmethod
    def chosen(cls, setting: Optional[str], rootdir: str,
               selection: Sequence[str] = ()) -> Optional["LauncherState"]:
        """The state of `--compile-cache-launcher-state` (None: the default; 'none': off)."""
        if setting is not None and setting.strip().lower() == "none":
            return None
        return cls(Path(setting) if setting else default_dir(), rootdir, selection)

    def trusted(self) -> bool:
        """Bytecode is code and the preload list names what to import: the directory is
        used only where no one else could have written it (made 0700 here, or one this
        user owns that is closed to others, under parents no one else can swap)."""
        from pytest_compilecache.isolation import unsafe_parent

        try:
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
            st = os.lstat(self.path)
        except OSError:
            return False
        return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
                and not st.st_mode & 0o022 and unsafe_parent(self.path) is None)

    def preloads(self) -> List[str]:
        """The libraries the last session with this interpreter, rootdir and selection
        preloaded."""
        if not self.trusted():
            return []
        try:
            data = json.loads(self.list_path.read_text())
        except (OSError, ValueError):
            return []
        modules = data.get("modules") if isinstance(data, dict) else None
        return [m for m in modules or [] if isinstance(m, str) and m]

    def keep_preloads(self, modules: List[str]) -> None:
        from pytest_compilecache.files import write_json_atomic

        if not self.trusted():
            return
        with contextlib.suppress(OSError):
            write_json_atomic(self.list_path, {"python": sys.executable, "modules": modules})
            lists = sorted(self.list_path.parent.glob("*.json"), key=_mtime, reverse=True)
            for old in lists[_LISTS:]:
                old.unlink()

    def bytecode_dir(self) -> Optional[Path]:
        """Where the preloaded interpreters keep bytecode; None where it cannot be made."""
        where = self.path / "bytecode"
        if not self.trusted():
            return None
        try:
            where.mkdir(mode=0o700, exist_ok=True)
            st = os.lstat(where)
        except OSError:
            return None
        private = (stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
                   and not st.st_mode & 0o022)  # a directory, not a link out of the state
        return where if private and os.access(where, os.W_OK) else None


def finds_bytecode(modules: Sequence[str]) -> bool:
    """Whether this interpreter, as it is set now (`sys.pycache_prefix`, optimization
    level), finds the bytecode of each of `modules` (dotted names in one installed
    package, the package first) where it looks for it; nothing is imported. pip compiles
    bytecode at install whatever PYTHONDONTWRITEBYTECODE says; an image that imported
    torch once at build time has it for the modules imported then only."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(modules[0].split(".")[0])
        origin = spec.origin if spec is not None else None
        if not origin or not origin.endswith("__init__.py"):
            return False
        for name in modules:
            path = os.path.join(os.path.dirname(origin), *name.split(".")[1:])
            source = (path + ".py" if os.path.isfile(path + ".py")
                      else os.path.join(path, "__init__.py"))
            if not os.path.isfile(importlib.util.cache_from_source(source)):
                return False
        return True
    except (ImportError, ValueError, NotImplementedError):
        return False


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0
