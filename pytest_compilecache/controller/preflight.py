"""Where the session will write, checked before anything compiles.

A report location, store or cache root that cannot be written would otherwise show up
after every check has compiled (a traceback at session end, one raw OSError per
check). Each problem is one line naming the option, the path and why. Nothing is
created here but a probe file, removed at once. No pytest, no torch.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import List, Optional

from pytest_compilecache.controller.diskspace import nearest_existing, no_space


def unwritable_dir(path: Path) -> Optional[str]:
    """Why files cannot be created in directory `path` (or in what would become it),
    or None. Probes with a real file: root ignores permission bits, read-only
    mounts do not."""
    base = nearest_existing(path)
    if not base.is_dir():
        return f"{base} is not a directory"
    try:
        fd, probe = tempfile.mkstemp(prefix=".compilecache-probe-", dir=base)
    except OSError as e:
        return f"cannot create files in {base} ({e.strerror or e})"
    os.close(fd)
    os.unlink(probe)
    return None


def problems(report: Optional[str], store: Optional[Path], store_option: Optional[str],
             root: Optional[str]) -> List[str]:
    """One line per unusable output location, naming its option (`store` is the
    resolved store directory, `store_option` what the user passed, if anything)."""
    out: List[str] = []
    if report:
        p = Path(report)
        why = f"{p} is a directory" if p.is_dir() else unwritable_dir(p.parent)
        if why:
            out.append(f"--compile-cache-report={report}: {why}; choose a writable file path")
    if store is not None:
        why = unwritable_dir(store)
        if why:
            named = (f"--compile-cache-store={store_option}" if store_option else
                     f"the key manifest store {store} (the default of --compile-cache-store)")
            out.append(f"{named}: {why}; choose a writable directory, or 'none' to record no "
                       f"key manifests")
    if root:
        why = unwritable_dir(Path(root))
        if why:
            out.append(f"--compile-cache-root={root}: {why}; choose a writable directory "
                       f"for the checks' cache roots")
    from pytest_compilecache.isolation import unsafe_parent

    existing = nearest_existing(Path(root or tempfile.gettempdir()))
    unsafe = unsafe_parent(existing)
    if unsafe:  # the cache roots hold code that the phases run
        named = (f"--compile-cache-root={root}" if root else
                 f"the temp dir {existing} (the default of --compile-cache-root)")
        out.append(f"{named}: {unsafe}")
    for label, path in (("--compile-cache-report", Path(report).parent if report else None),
                        ("the key manifest store", store), ("--compile-cache-root",
                                                            Path(root) if root else None)):
        full = no_space(path) if path is not None else None
        if full:
            out.append(f"{label}: {full}")
    return out
