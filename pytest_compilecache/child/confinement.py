"""Did a phase's caches stay inside its private root?

The phase's environment points torch and Triton at the check's root, but the user's
code runs after that: a conftest that shares a team cache
(`os.environ["TORCHINDUCTOR_CACHE_DIR"] = "/srv/team-cache"`), a module that clears
the environment, a body that turns a remote cache on. torch reads these settings
when it compiles, not when it starts, so a "cold" run may read someone's entries and
pass for cold. So, in the phase child:

- before the workload, the private settings the test's code changed are put back
  (the check shows the warm start production gets, with private caches: only the
  cache settings are the plugin's) and the change is said in a note;
- after the workload, and again when the phase ends, torch's and Triton's own answer
  to "where is your cache" must lie inside the root, else the phase is an error that
  names the setting and where it pointed.

What the child found becomes the phase's error in the controller, which also judges a
phase that started on an empty root and still hit a cache layer (judge/confinement.py).
No pytest; torch only through what the child has imported.
"""
from __future__ import annotations

import os
import sys
import tempfile
from typing import Dict, List, Mapping, MutableMapping, Tuple

from pytest_compilecache.terms import PRIVATE_FIX


def reclaim(expected: Mapping[str, str], environ: MutableMapping[str, str] = os.environ
            ) -> List[str]:
    """Put back the private settings the test's code changed since the phase started;
    a line saying what was changed, for the check's notes (none when nothing was)."""
    changed = []
    for name, value in expected.items():
        now = environ.get(name)
        if now == value:
            continue
        environ[name] = value
        changed.append(f"{name} {'set to ' + repr(now) if now is not None else 'removed'}")
    if not changed:
        return []
    if "TMPDIR" in expected:
        tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    cleared = (" (the environment was cleared?)" if any(c.endswith("removed") for c in changed)
               else "")
    return [f"the test's code changed the check's private cache settings{cleared}: "
            + ", ".join(changed) + f"; the check put its own back for the workload ({PRIVATE_FIX})"]


def _inside(path: str, root: str) -> bool:
    real, top = os.path.realpath(path), os.path.realpath(root)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def cache_dirs() -> Dict[str, str]:
    """Where torch and Triton put their caches now, by their own functions (an answer
    only for what this process has imported)."""
    found: Dict[str, str] = {}
    utils = (sys.modules.get("torch._inductor.runtime.cache_dir_utils")
             or sys.modules.get("torch._inductor.runtime.runtime_utils"))
    if utils is not None:
        env = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        try:  # cache_dir() itself would create the directory and set the variable
            found["inductor"] = os.path.abspath(env) if env else utils.default_cache_dir()
        except Exception:
            pass
    triton = sys.modules.get("triton")
    if triton is not None:
        try:
            knobs = getattr(triton, "knobs", None)
            if knobs is not None:
                found["triton"] = str(knobs.cache.dir)
            else:
                from triton.runtime.cache import default_cache_dir  # type: ignore

                found["triton"] = str(default_cache_dir())
        except Exception:
            pass
    found["tmp"] = tempfile.gettempdir()
    return found


_WHAT = {"inductor": ("TORCHINDUCTOR_CACHE_DIR", "Inductor's caches (FX graphs, AOTAutograd, "
                      "PGO profiles, kernels, autotune results) were"),
         "triton": ("TRITON_CACHE_DIR", "Triton's kernel cache was"),
         "tmp": ("TMPDIR", "the temp dir (precompiled headers, some cache files) was")}


def escapes(root: str, expected: Mapping[str, str], when: str) -> List[Tuple[str, str]]:
    """(dir, line) per cache directory outside `root`, the line naming the setting
    that moved it."""
    out = []
    for label, path in cache_dirs().items():
        if _inside(path, root):
            continue
        var, what = _WHAT[label]
        now = os.environ.get(var)
        if now is None:
            how = (f"{var} is unset (the test's code removed it or cleared the environment), "
                   f"so torch fell back to its default")
        elif now != expected.get(var):
            how = f"{var}={now!r} (set by the test's code)"
        else:
            how = (f"{var} still names the private dir, but the test's code moved it in code"
                   + (" (triton.knobs.cache.dir)" if label == "triton" else ""))
        out.append((label, f"{what} at {path}, outside the check's private root {root}, {when}: "
                   f"{how}"))
    return out
