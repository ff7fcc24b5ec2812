"""The test run's g++ cache (tests/cxx_cache.py, the sessions' CXX): a kernel built in one
session's cache dir is served to another's without g++; an edited kernel is built again."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import cxx_cache

KERNEL = 'extern "C" int kernel() { return 7; }\n'
pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no g++")


def no_gxx(args: list) -> int:
    raise FileNotFoundError(args[0])


def build(cache_dir: Path, text: str) -> Path:
    """One Inductor-like command: the source and the .so in a session's own cache dir."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    src = cache_dir / "ckernel.cpp"
    src.write_text(text)
    out = cache_dir / "ckernel.so"
    assert cxx_cache.main([str(src), "-O1", "-shared", "-fPIC", "-o", str(out)]) == 0
    return out


def test_a_kernel_built_once_is_served_to_another_cache_dir_without_gxx(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cxx_cache.CACHE_ENV, str(tmp_path / "store"))
    (tmp_path / "store").mkdir()
    first = build(tmp_path / "a", KERNEL)
    monkeypatch.setattr(cxx_cache.subprocess, "call", no_gxx)
    second = build(tmp_path / "b", KERNEL)
    assert second.read_bytes() == first.read_bytes()
    # an edited kernel is another key: it goes to g++ (here gone, so it fails)
    with pytest.raises(FileNotFoundError):
        build(tmp_path / "c", KERNEL.replace("7", "8"))


def test_without_a_store_or_a_kernel_output_it_is_plain_gxx(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(cxx_cache.CACHE_ENV, raising=False)
    build(tmp_path / "a", KERNEL)
    monkeypatch.setattr(cxx_cache.subprocess, "call", no_gxx)
    with pytest.raises(FileNotFoundError):  # nothing was kept: g++ again
        build(tmp_path / "b", KERNEL)


def test_inductor_takes_the_cache_for_gxx(tmp_path: Path) -> None:
    # under a name that is not g++'s, Inductor drops gcc's flags and names the
    # precompiled header .pch, which g++ never reads: each kernel parsed the headers
    from torch._inductor.cpp_builder import _is_gcc

    link = cxx_cache.gxx_named_link(tmp_path)
    assert _is_gcc(str(link)) and not _is_gcc(str(Path(cxx_cache.__file__)))
    version = subprocess.run([str(link), "-dumpfullversion"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.strip()[0].isdigit()


def test_a_precompiled_header_is_served_to_another_temp_dir_without_gxx(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cxx_cache.CACHE_ENV, str(tmp_path / "store"))
    (tmp_path / "store").mkdir()
    built = []
    for name in ("a", "b"):  # a check's own temp dir each, the same header text
        header = tmp_path / name / "pch.h"
        header.parent.mkdir()
        header.write_text("#include <vector>\n")
        out = header.with_name("pch.h.gch")
        assert cxx_cache.main(["-x", "c++-header", str(header), "-o", str(out)]) == 0
        built.append(out.read_bytes())
        monkeypatch.setattr(cxx_cache.subprocess, "call", no_gxx)
    assert built[1] == built[0]
