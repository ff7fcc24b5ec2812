"""os.environ while the preloaded interpreter imports (forkserver.py): which variables
torch and the libraries read at import, which of those reads a phase can make again
(a torch config entry being installed, replayed in the phase; a capture the phase
redoes), and where any other read or a copy of the whole environment was made, and by
which module. Reads made by the code of modules in `ignored` (the plugin's own, while the
forkserver imports what every phase imports: owndeps.py) are not recorded.
"""
from __future__ import annotations

import collections.abc
import os
import sys
from types import FrameType
from typing import Any, Dict, FrozenSet, Iterator, List, Optional, Tuple

# an entry whose env defaults torch read at import: (entry, __init__ args) to replay
Replay = Tuple[Any, Tuple[Any, ...]]


class EnvSpy(collections.abc.MutableMapping):  # type: ignore[type-arg]
    """os.environ while the preload imports: records every variable read, and which
    reads came from a torch config entry being installed (those can be read again)."""

    def __init__(self, env: Any, ignored: FrozenSet[str] = frozenset()) -> None:
        self.env = env
        self.ignored = ignored  # top-level modules whose own reads are not recorded
        self.reads: Dict[str, bool] = {}  # name -> every read can be read again in a phase
        self.readers: Dict[str, str] = {}  # name -> where a read that cannot was made
        self.entries: List[Tuple[List[str], Replay]] = []
        self.redo: List[str] = []  # captures a phase redoes (_REDO)
        self.quiet = 0  # reads made by our own stand-ins (cudaprobe.CudaAsked) are not torch's
        # where the whole environment was copied (dict(os.environ)): {"where", "module"}
        self.copies: List[Dict[str, str]] = []
        self._copying: set = set()  # keys a copy still reads, one by one

    def _saw(self, key: str) -> None:
        if self.quiet:
            return
        if key in self._copying:  # part of a whole copy, recorded as one
            self._copying.discard(key)
            return
        replay, again_here, where, module = _reader(key)
        if module in self.ignored:
            return
        if replay is not None:
            self.entries.append(([key], replay))
        if where in REDO_BY_NAME and where not in self.redo:
            self.redo.append(where)
        again = replay is not None or again_here
        if not again:
            self.readers.setdefault(key, where)
        self.reads[key] = self.reads.get(key, True) and again

    def __getitem__(self, key: str) -> str:
        self._saw(key)
        return self.env[key]

    def get(self, key: str, default: Any = None) -> Any:
        self._saw(key)
        return self.env.get(key, default)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self._saw(key)
        return key in self.env

    def __setitem__(self, key: str, value: str) -> None:
        self.env[key] = value

    def __delitem__(self, key: str) -> None:
        del self.env[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.env)

    def __len__(self) -> int:
        return len(self.env)

    def copy(self) -> Dict[str, str]:
        """os.environ.copy(): a copy of the whole environment, as dict(os.environ) is."""
        self._copied()
        return dict(self.env)

    def keys(self) -> Any:
        """dict(os.environ) asks for the keys, then reads each: a copy of the whole
        environment (fsspec's config at import), recorded as one, with where."""
        self._copied()
        self._copying = set(self.env)
        return self.env.keys()

    def _copied(self) -> None:
        if self.quiet:
            return
        _, _, where, module = _reader("")
        copy = {"where": where, "module": module}
        if module not in self.ignored and copy not in self.copies:
            self.copies.append(copy)

    # listing the environment is not reading a variable: tqdm scans it for TQDM_*
    def items(self) -> Any:
        return self.env.items()

    def values(self) -> Any:
        return self.env.values()


_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()))
_PLUMBING = ("os.py", "tempfile.py", "forkserver.py", "envspy.py", "_collections_abc.py")


def _redo_dynamo_cache() -> bool:
    """torch._dynamo.package builds its precompile cache (`DynamoCache`, 2.9+) on
    `cache_dir()/dynamo` at import: point it at the phase's cache dir, as its import
    would have. False where the object is not the one this was written for."""
    pkg = sys.modules.get("torch._dynamo.package")
    store = getattr(pkg, "DynamoCache", None)
    if store is None or not hasattr(store, "_path_prefix") or not hasattr(pkg, "cache_dir"):
        return False
    store._path_prefix = os.path.join(pkg.cache_dir(), "dynamo")  # type: ignore[union-attr]
    return True


def _redo_header_dir() -> bool:
    """torch._inductor.codecache keeps its precompiled-header dir (2.8+) at import:
    `default_cache_dir()/precompiled_headers`, under the temp dir (and the user) of the
    interpreter that imported it. Point it under the phase's temp dir, as its import
    would have: otherwise every phase forked from one preloaded interpreter writes its
    headers in that interpreter's dir, and a warm phase (forked from another) compiles
    them again where a restart finds them. False where the names are not these."""
    codecache = sys.modules.get("torch._inductor.codecache")
    if codecache is None or not hasattr(codecache, "_HEADER_DIR"):
        return True  # nothing captured
    default_cache_dir = getattr(codecache, "default_cache_dir", None)
    if default_cache_dir is None or not hasattr(codecache, "_HEADER_LOCK_DIR"):
        return False
    header_dir = os.path.join(default_cache_dir(), "precompiled_headers")
    codecache._HEADER_DIR = header_dir  # type: ignore[attr-defined]
    codecache._HEADER_LOCK_DIR = os.path.join(header_dir, "locks")  # type: ignore[attr-defined]
    return True


def _redo_caching_precompile() -> bool:
    """torch._dynamo.config sets `caching_precompile` (2.9+) from TORCH_CACHING_PRECOMPILE
    as it runs, a plain value its entry keeps as the default (no variable read again, as
    its other entries are): set that default from the phase's variable, as its import
    would have (not as an override: torch tells a default from a value set in code), and
    drop what the module computed from its values. False where the entry or those caches
    are not the ones this was written for."""
    config = sys.modules.get("torch._dynamo.config")
    entry = getattr(config, "_config", {}).get("caching_precompile")
    if entry is None or not hasattr(entry, "default"):
        return False
    entry.default = os.environ.get("TORCH_CACHING_PRECOMPILE", "0") == "1"
    return _values_changed(config, "caching_precompile")


def _values_changed(config: Any, name: str) -> bool:
    """Drop what a torch config module keeps computed from its values (its hash, its
    dicts), as torch's own `_mark_config_dirty` does when one is set: a dirty flag
    (`_is_dirty`, torch 2.12 and before) or a context variable (2.13+), and the dicts'
    mark where there is one. False where neither is there."""
    marked = False
    if hasattr(config, "_is_dirty"):
        config._is_dirty = True
        marked = True
    dirty = getattr(config, "_hash_dirty_var", None)
    if dirty is not None:
        dirty.set(True)
        marked = True
    mark_dicts = getattr(config, "_mark_get_dict_dirty", None)
    if marked and mark_dicts is not None:
        mark_dicts(name)
    return marked


# a phase's own variable read at import by a known capture: (variable, file, function)
# -> what a phase calls to redo it, after taking its environment
_REDO = {("TORCHINDUCTOR_CACHE_DIR", "_dynamo/package.py", "<module>"): _redo_dynamo_cache,
         ("TORCH_CACHING_PRECOMPILE", "_dynamo/config.py", "<module>"):
             _redo_caching_precompile}
# captures of the temp dir: tempfile caches it, so an import need not read TMPDIR to
# capture it; known by the module that holds it (module -> what a phase calls to redo it)
REDO_BY_MODULE = {"torch._inductor.codecache": _redo_header_dir}
REDO_BY_NAME = {fn.__name__: fn for fn in (*_REDO.values(), *REDO_BY_MODULE.values())}
# a capture of one variable: nothing to redo where a phase has the value it had at import
REDO_VARIABLE = {fn.__name__: var for (var, _, _), fn in _REDO.items()}


def _reader(key: str) -> Tuple[Optional[Replay], bool, str, str]:
    """Who reads the environment: a torch config entry being installed (with its
    __init__'s arguments, to replay; torch.utils._config_module, 2.5-2.15),
    tempfile.gettempdir (its cache is cleared in each phase) or a capture in `_REDO`
    (its name comes back as where); where the read was made, and the top-level module
    whose code made it (the innermost frame outside the standard library)."""
    f: Optional[FrameType] = sys._getframe(3)
    where = module = ""
    for _ in range(40):
        if f is None:
            break
        code = f.f_code
        for (var, suffix, func), redo in _REDO.items():
            if key == var and code.co_name == func and code.co_filename.replace(
                    os.sep, "/").endswith(suffix):
                return None, True, redo.__name__, module
        if code.co_name == "__init__" and code.co_filename.endswith("_config_module.py"):
            names = code.co_varnames[:code.co_argcount]
            try:
                args = tuple(f.f_locals[n] for n in names)
            except KeyError:
                return None, False, where, module
            return (args[0], args[1:]), False, where, module
        if code.co_name == "_candidate_tempdir_list" and code.co_filename.endswith("tempfile.py"):
            return None, True, where, module
        if not code.co_filename.endswith(_PLUMBING) and not code.co_filename.startswith("<frozen"):
            if not where:
                where = f"{'/'.join(code.co_filename.split(os.sep)[-2:])}:{f.f_lineno}"
            top = str(f.f_globals.get("__name__") or "").split(".")[0]
            if not module and top not in _STDLIB:
                module = top
        f = f.f_back
    return None, False, where, module
