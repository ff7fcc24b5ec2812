"""What a phase wrote under the cache root, and which cache layer each file belongs to.

Counters alone miss rebuilt C++ objects (CppCodeCache has none), so a true warm
start is also checked on disk: it must add no file. Pure stdlib.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import IO, Any, Dict, Iterable, Iterator, List, Mapping, Optional, Set

from pytest_compilecache.jsonfile import Unreadable, open_regular

Snapshot = Dict[str, int]  # "<watched>/<relpath>" -> size

_IGNORED = re.compile(r"(^|/)(locks/|__pycache__/)|\.lock$|(^|/)\.[^/]*\.tmp$")


def write_json_atomic(path: Path, data: Any, sort_keys: bool = False) -> None:
    """Write-then-rename: a reader, or an interrupted run, never sees half a file."""
    with _atomic(Path(path)) as f:
        json.dump(data, f, indent=1, sort_keys=sort_keys, default=str)
        f.write("\n")


def write_json_streamed(path: Path, data: Dict[str, Any], key: str) -> None:
    """As write_json_atomic, with `data[key]` any iterable, written as a list one item
    at a time (last): a report's checks, read from disk one by one, are never all in
    memory at once."""
    with _atomic(Path(path)) as f:
        f.write("{")
        for k, v in data.items():
            if k != key:
                f.write(f"\n {json.dumps(k)}: " + json.dumps(v, indent=1, default=str)
                        .replace("\n", "\n ") + ",")
        f.write(f"\n {json.dumps(key)}: [")
        for i, item in enumerate(data.get(key) or ()):
            f.write(("," if i else "") + "\n  " + json.dumps(item, indent=1, default=str)
                    .replace("\n", "\n  "))
        f.write("\n ]\n}\n")


@contextlib.contextmanager
def _atomic(path: Path) -> Iterator[IO[str]]:
    """A temporary file beside `path`, renamed onto it when the block ends without error."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def snapshot(watched: Mapping[str, Path]) -> Snapshot:
    out: Snapshot = {}
    for label, root in watched.items():
        if not root.is_dir():
            continue
        for dirpath, _, filenames in os.walk(root):
            for fn in filenames:
                full = os.path.join(dirpath, fn)
                rel = f"{label}/{os.path.relpath(full, root)}"
                if _IGNORED.search(rel):
                    continue
                try:
                    out[rel] = os.path.getsize(full)
                except OSError:
                    pass
    return out


def added(before: Snapshot, after: Snapshot) -> List[str]:
    return sorted(set(after) - set(before))


def damaged(built: Snapshot, now: Snapshot) -> List[str]:
    """Files the cold run wrote that are gone or changed size since (a full disk, a
    concurrent wipe, an interrupted copy), each said with both sizes."""
    out = []
    for path, size in sorted(built.items()):
        if path not in now:
            out.append(f"{path}: missing, cold wrote {_size(size)}")
        elif now[path] != size:
            out.append(f"{path}: {_size(now[path])}, cold wrote {_size(size)}")
    return out


def _size(n: int) -> str:
    return f"{n} bytes" if n < 1024 else f"{n / 1024:.0f} KB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MB"


def saved_keys(snap: Snapshot) -> Set[str]:
    """Keys with an entry on disk: inductor/aotautograd/<key>/…, inductor/fxgraph/xx/<key>/…"""
    keys: Set[str] = set()
    for p in snap:
        parts = p.split("/")
        if len(parts) >= 4 and parts[1] == "aotautograd":
            keys.add(parts[2])
        elif len(parts) >= 5 and parts[1] == "fxgraph":
            keys.add(parts[3])
    return keys


def read_regular(path: Any, limit: int = -1) -> Optional[bytes]:
    """The first `limit` bytes of `path` (all of them: -1), None where it cannot be read
    or is no regular file: a phase may leave a FIFO where a kernel's source was, and
    reading one blocks the session."""
    try:
        with open_regular(path) as f:
            return f.read(limit)
    except (OSError, Unreadable):
        return None


# torch's VecISA checks (torch/_inductor/cpu_vec_isa.py) compile tiny programs into the
# cache dir, once per empty directory: `__avx_chk_kernel`, `__avx512_bf16_chk_kernel`...
_ISA_PROBE = "_chk_kernel"


def cpu_capability_probes(watched: Mapping[str, str], paths: Iterable[str]) -> Set[str]:
    """Of `paths` (from `snapshot` over `watched`), the files of torch's CPU capability
    probes: any process on an empty cache directory builds them, whatever it loaded;
    they are not the model's kernels. Told apart by their C++ source."""
    paths = list(paths)
    probes: Set[str] = set()
    for p in paths:
        label, _, rel = p.partition("/")
        if not p.endswith(".cpp") or label not in watched:
            continue
        source = read_regular(os.path.join(watched[label], rel), 4096)
        if source is not None and _ISA_PROBE.encode() in source:
            stem = p[: -len(".cpp")]
            probes.update(q for q in paths if q.startswith(stem))
    return probes


def identical_triton_recompiles(triton_dir: Path, warm_new: Iterable[str]) -> List[Dict[str, str]]:
    """Warm Triton cache dirs whose artifacts are byte-identical to an older dir's.

    Such a kernel was recompiled only because Triton's key changed outside the kernel
    (its toolchain part: the ptxas version; options; env vars), not its source.
    """
    new_dirs = {p.split("/")[1] for p in warm_new if p.startswith("triton/") and p.count("/") >= 2}
    if not new_dirs or not triton_dir.is_dir():
        return []

    def names(d: Path) -> frozenset:
        return frozenset(f.name for f in d.iterdir() if f.is_file() and not f.name.endswith(".json"))

    def artifacts(d: Path) -> Dict[str, bytes]:
        read = {n: read_regular(d / n) for n in names(d)}
        if any(v is None for v in read.values()):
            raise OSError(f"{d}: a file that is no regular file")
        return {n: v for n, v in read.items() if v is not None}

    by_names: Dict[frozenset, List[Path]] = {}  # old dirs by their artifact names, listed once
    for d in triton_dir.iterdir():
        if d.is_dir() and d.name not in new_dirs:
            with contextlib.suppress(OSError):
                by_names.setdefault(names(d), []).append(d)
    found = []
    for name in sorted(new_dirs):
        try:
            mine = artifacts(triton_dir / name)
        except OSError:
            continue
        for other in by_names.get(frozenset(mine), []) if mine else []:
            with contextlib.suppress(OSError):
                if artifacts(other) == mine:
                    kernel = next(iter(mine)).rsplit(".", 1)[0]
                    found.append({"kernel": kernel, "warm": name, "cold": other.name})
                    break
    return found
