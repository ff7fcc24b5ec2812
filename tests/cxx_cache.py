#!/usr/bin/env python3
"""The C++ compiler of the test run's sessions (CXX, tests/conftest.py): g++, behind a cache
of whole outputs shared by every session of one test run.

Why: the slow lane compiles the same tiny models in ~150 cold phases, each from an empty
cache dir, and g++ is most of a cold CPU compile (Inductor builds each kernel to a .so in
one command, compile and link, which ccache does not cache). Inductor names each source by
a hash of its text, so the same kernel is one key in every session's private cache dir.

The key holds every argument (paths of the source and the output by name only, as the
cache dirs differ) and the bytes of every file argument that exists (the source, a header).
A kernel's .so and the precompiled header's .gch are kept (preprocessed text goes straight
to g++): a hit copies the stored file to where g++ would write it, a miss runs g++ and
stores what it wrote. The .gch matters where a check's temp dir is its own (a warm phase
in a fresh root, the sessions that drop the shared header dir): ~7.5 CPU-s of g++ each.
A kernel any test edits has other bytes, so another key. Test runs only: the
product never sets CXX, and the users' sessions use their own compiler."""
from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List, Optional

CACHE_ENV = "COMPILECACHE_TESTS_CXX_CACHE"
REAL_CXX = "g++"
# what is kept: a kernel (.so) and the precompiled header (.gch), built from the same
# header text in each check's own temp dir where a check does not share the dir
KEPT = (".so", ".gch")


def gxx_named_link(store: Path) -> Path:
    """This script behind `<store>/bin/g++`: Inductor knows g++ by its name (cpp_builder's
    `_is_gcc` matches the CXX path), and under another name it drops gcc's flags and
    names the precompiled header `.pch`, which g++ never reads (it looks for `.gch`):
    every kernel would parse torch's headers again (~3 s of g++, not ~0.5). Run by this
    Python without site-packages or PYTHON* variables (it needs the standard library
    only): `python3` found on PATH may be a version manager's shell shim, and each
    phase calls the compiler ~4 times (0.10 CPU-s a call through pyenv's, 0.03 so)."""
    link = store / "bin" / "g++"
    link.parent.mkdir(exist_ok=True)
    me = shlex.quote(str(Path(__file__).resolve()))
    link.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -S -E {me} "$@"\n')
    link.chmod(0o755)
    return link


def output_of(args: List[str]) -> Optional[Path]:
    """The file after -o, if the command names one."""
    for i, arg in enumerate(args[:-1]):
        if arg == "-o":
            return Path(args[i + 1])
    return None


def key_of(args: List[str], out: Path) -> str:
    """Every argument, and the bytes of each that names a file (the output by name)."""
    digest = hashlib.sha256(REAL_CXX.encode())
    for arg in args:
        path = Path(arg)
        if arg == str(out):
            digest.update(b"\0out\0" + path.name.encode())
        elif path.is_file():
            digest.update(b"\0file\0" + path.name.encode() + path.read_bytes())
        else:
            digest.update(b"\0arg\0" + arg.encode())
    return digest.hexdigest()


def main(args: List[str]) -> int:
    store = os.environ.get(CACHE_ENV)
    out = output_of(args)
    if not store or out is None or out.suffix not in KEPT:
        return subprocess.call([REAL_CXX, *args])
    stored = Path(store) / key_of(args, out)
    if stored.is_file():
        shutil.copyfile(stored, out)
        return 0
    code = subprocess.call([REAL_CXX, *args])
    if code == 0 and out.is_file():
        # written whole, then renamed: a session beside this one sees all of it or none
        partial = stored.with_name(f"{stored.name}.{os.getpid()}")
        shutil.copyfile(out, partial)
        os.replace(partial, stored)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
