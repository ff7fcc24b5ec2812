"""The one way the plugin reads a JSON file that another process wrote: a stored key
manifest or its components, the report a session merges into, --compile-cache-shard-times,
the CLI's inputs, the Action's report.

Such a file may be damaged or crafted (a copied store, a downloaded artifact), and
json.loads alone fails on them in ways the callers did not catch: a file nesting
200,000 lists raised RecursionError from a session's last hook and lost every verdict
of the session; a huge one raised MemoryError. Here the size is bounded before the
bytes are read and the depth after they are parsed, and every failure other than a
missing file becomes one exception, Unreadable, that names the file and what is wrong:
each caller adds its repair (delete and re-record, pass another file) and turns it
into its own outcome (a check's error, a usage error, the CLI's exit 2).

Pure stdlib: no pytest, no torch.
"""
from __future__ import annotations

import gzip
import json
import os
import stat
import zlib
from pathlib import Path
from typing import IO, Any, List, Optional, Union

# What this plugin writes is shallow (a report nests 9 levels) and a few MB a hundred
# checks; the caps leave room for large suites and stop what would exhaust the process.
MAX_DEPTH = 64
MAX_MB_ENV = "PYTEST_COMPILECACHE_MAX_JSON_MB"
DEFAULT_MAX_MB = 512


class Unreadable(ValueError):
    """A JSON file that is there but cannot be used: names it and says why (one line).
    Callers append the repair that fits what the file is."""

    def __init__(self, path: Any, why: str) -> None:
        self.path, self.why = str(path), why
        super().__init__(f"{path} cannot be read: {why}")

    def __reduce__(self) -> Any:  # picklable, as exceptions crossing processes must be
        return (type(self), (self.path, self.why))


def max_bytes() -> int:
    """The size cap: $PYTEST_COMPILECACHE_MAX_JSON_MB (the repair a too-large file's
    message names), else DEFAULT_MAX_MB."""
    try:
        mb = float(os.environ.get(MAX_MB_ENV) or DEFAULT_MAX_MB)
    except ValueError:
        mb = DEFAULT_MAX_MB
    return int(mb * (1 << 20))


def load(path: Union[str, Path], gz: bool = False, limit: Optional[int] = None) -> Any:
    """The parsed content of `path` (gzip-compressed with `gz`), at most `limit` bytes
    (uncompressed; default max_bytes()) and MAX_DEPTH levels deep. FileNotFoundError
    propagates (a missing file is often no error: no manifest yet); anything else that
    is wrong raises Unreadable."""
    cap = max_bytes() if limit is None else limit
    try:
        with open_regular(path) as f:
            if gz:
                with gzip.GzipFile(fileobj=f, mode="rb") as unpacked:
                    raw = unpacked.read(cap + 1)
            else:
                size = os.fstat(f.fileno()).st_size
                if size > cap:
                    raise Unreadable(path, _too_big(size, cap, gz, limit is None))
                raw = f.read(cap + 1)
    except FileNotFoundError:
        raise
    except (OSError, EOFError, zlib.error) as e:  # unreadable, a directory, not gzip, truncated
        raise Unreadable(path, f"{type(e).__name__}: {e}") from None
    except MemoryError:
        raise Unreadable(path, "not enough memory to read it") from None
    if len(raw) > cap:
        raise Unreadable(path, _too_big(len(raw), cap, gz, limit is None))
    return loads(raw, path)


def open_regular(path: Union[str, Path]) -> IO[bytes]:
    """`path` opened for reading, refused (Unreadable) unless it is a regular file: a
    FIFO in place of a stored manifest blocked the session that opened it, forever
    (`show <fifo>` too), and a device reads without end. Checked before the open (which
    cannot block: O_NONBLOCK) and again on what was opened (it may have been swapped
    in between)."""
    refused = _not_regular(os.stat(path).st_mode)
    if refused:
        raise Unreadable(path, refused)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        refused = _not_regular(os.fstat(fd).st_mode)
        if refused:
            raise Unreadable(path, refused)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _not_regular(mode: int) -> Optional[str]:
    if stat.S_ISREG(mode):
        return None
    kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode)
            or stat.S_ISBLK(mode) else "not a regular file")
    return f"{kind}, not a regular file: reading it could block or never end"


def loads(raw: Union[bytes, str], path: Any) -> Any:
    """As load(), for bytes already read from `path` (named in the message)."""
    try:
        data = json.loads(raw)
    except RecursionError:  # json's C parser recurses once per level
        raise Unreadable(path, f"nested deeper than {MAX_DEPTH} levels (deeper than "
                               f"Python can parse): not a file pytest-compilecache "
                               f"writes") from None
    except MemoryError:
        raise Unreadable(path, "not enough memory to parse it") from None
    except ValueError as e:  # truncated, not JSON, not UTF-8 (UnicodeDecodeError)
        raise Unreadable(path, f"{type(e).__name__}: {e}") from None
    if (type(data) is dict or type(data) is list) and _depth_over(data, MAX_DEPTH):
        raise Unreadable(path, f"nested deeper than {MAX_DEPTH} levels: not a file "
                               f"pytest-compilecache writes (reading it could exhaust the "
                               f"stack of whoever reads it next)")
    return data


def _depth_over(data: Any, limit: int) -> bool:
    """Whether `data` nests more than `limit` arrays or objects. One level at a time,
    so that the check cannot recurse, and only containers are kept: a quarter of the
    parse's time on a 65 MB report (a walk of every value took two thirds)."""
    level = [data]
    for _ in range(limit):
        deeper: List[Any] = []
        for obj in level:
            values = obj.values() if type(obj) is dict else obj
            deeper += [v for v in values if type(v) is dict or type(v) is list]
        if not deeper:
            return False
        level = deeper
    return True


def _too_big(size: int, cap: int, gz: bool, settable: bool) -> str:
    return (f"{'unpacks to' if gz else 'is'} over {cap >> 20} MiB ({size >> 20}+ MiB), the "
            f"cap on a JSON file of this kind" + (
                f" (set {MAX_MB_ENV}=<MiB> to read it anyway, where memory allows ~4x "
                f"its size)" if settable else ": not a file pytest-compilecache writes"))
