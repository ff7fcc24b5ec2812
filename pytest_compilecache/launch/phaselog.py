"""A phase's log, bounded on disk and read from its end.

The phase (and its compile workers, and whatever the test body starts) writes straight
into `<root>/phases/<phase>.log` through fds 1 and 2: no pipe, so that nothing in the
phase ever blocks on the controller, and the log names the phase in /proc/<pid>/fd/1.
A phase that prints without end must not fill the disk nor, to show its last lines,
the controller's memory. So:

- The log is opened O_APPEND, and `CappedLog` (a thread in the launcher) follows it:
  it keeps the last `TAIL_BYTES` it read in memory and, when what it read grows past
  `HEAD_BYTES + TAIL_BYTES`, frees the disk blocks of what it read after the head
  (fallocate's PUNCH_HOLE: the file keeps its length and becomes sparse, so writers
  appending at its end lose nothing). Once the phase is over, the file is rewritten as
  its head, a line that says how much was left out, and the kept tail. Where the
  filesystem cannot punch holes, it truncates back to the head instead, and output
  written in the instant between the last read and that cut is lost (a phase that
  printed 200 MiB lost its last line that way under load).
  RLIMIT_FSIZE would kill the phase (SIGXFSZ); a pipe and a reader would make a
  phase that prints wait on the controller.
- `read_end` reads the last bytes of a log, never all of it; `useful_tail` picks the
  lines that say what went wrong.
No pytest, no torch.
"""
from __future__ import annotations

import ctypes
import errno
import os
import re
import threading
from pathlib import Path
from typing import Any, Optional

HEAD_BYTES = 4 << 20
TAIL_BYTES = 4 << 20
_CHUNK = 1 << 20
STDERR_TAIL_LINES = 40


def open_log(path: Path) -> int:
    """A phase's fd 1 and 2: emptied, appended to (a cut by `CappedLog` leaves no hole)."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o666)


class CappedLog:
    """While a phase runs (a context manager around it): keep its log at most
    `head + tail` bytes (plus what the phase writes in `every` seconds)."""

    def __init__(self, path: Path, head: int = HEAD_BYTES, tail: int = TAIL_BYTES,
                 every: float = 0.05) -> None:
        self.path, self.head, self.tail, self.every = path, head, tail, every
        self.pos = 0  # how far the file has been read
        self.read = 0  # bytes read in all: the phase's output, less what a cut lost
        self.kept = bytearray()  # the last `tail` bytes read
        self.cut = False
        self.freed = 0  # where the freed (punched) part of the file ends
        self._stop = threading.Event()
        self._fd: Optional[int] = None
        self._thread: Optional[threading.Thread] = None

    def __enter__(self) -> "CappedLog":
        try:
            self._fd = os.open(self.path, os.O_RDWR)
        except OSError:  # no log to follow: the phase's own open will say why
            return self
        self._thread = threading.Thread(target=self._follow, name="compilecache-log",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._fd is None:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            self._catch_up()
            if self.cut:
                self._rewrite()
        except OSError:
            pass
        finally:
            os.close(self._fd)
            self._fd = None

    def _follow(self) -> None:
        while not self._stop.is_set():
            try:
                busy = self._catch_up() >= _CHUNK
                if self.pos - max(self.freed, self.head) > self.tail:
                    self._free()
            except OSError:
                return
            if not busy:
                self._stop.wait(self.every)

    def _free(self) -> None:
        """Give back the disk blocks of what was read past the head (it is kept in
        memory as far as the tail needs it); truncate where holes cannot be punched."""
        start = max(self.freed, self.head)
        if punch_hole(self._fd, start, self.pos - start):  # type: ignore[arg-type]
            self.freed, self.cut = self.pos, True
        else:  # output appended between the last read and this cut is lost
            os.ftruncate(self._fd, self.head)  # type: ignore[arg-type]
            self.pos, self.freed, self.cut = self.head, self.head, True

    def _catch_up(self) -> int:
        """Read what was appended since the last read; how many bytes."""
        got = 0
        while True:
            data = os.pread(self._fd, _CHUNK, self.pos)  # type: ignore[arg-type]
            if not data:
                return got
            self.pos += len(data)
            got += len(data)
            self.read += len(data)
            self.kept += data
            if len(self.kept) > self.tail:
                del self.kept[:len(self.kept) - self.tail]

    def _rewrite(self) -> None:
        """Head, what was left out, tail from its first whole line: all writers are gone."""
        tail = bytes(self.kept)
        cut = tail.find(b"\n")
        if 0 <= cut < len(tail) - 1:
            tail = tail[cut + 1:]
        left_out = self.read - self.head - len(tail)
        say = (f"\n[pytest-compilecache: {left_out / 2**20:.1f} MiB of this phase's output "
               f"left out here: its log keeps the first {self.head >> 20} MiB and the last "
               f"{self.tail >> 20} MiB]\n").encode()
        os.ftruncate(self._fd, self.head)  # type: ignore[arg-type]
        os.pwrite(self._fd, say + tail, self.head)  # type: ignore[arg-type]


_FALLOC_FL_KEEP_SIZE, _FALLOC_FL_PUNCH_HOLE = 0x01, 0x02
_punch: Any = None  # libc's fallocate, found on first use; False where there is none


def punch_hole(fd: int, offset: int, length: int) -> bool:
    """Free the disk blocks of a byte range, the file's length unchanged (Linux
    fallocate PUNCH_HOLE); False where the filesystem or the platform cannot."""
    global _punch
    if _punch is None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            _punch = libc.fallocate
            _punch.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong)
        except (OSError, AttributeError):
            _punch = False
    if not _punch or length <= 0:
        return bool(_punch) and length <= 0
    if _punch(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, offset, length) == 0:
        return True
    if ctypes.get_errno() not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return False


def read_end(path: Path, nbytes: int) -> str:
    """The last `nbytes` of a file (from its first whole line), decoded; "" if unreadable."""
    try:
        with open(path, "rb") as f:
            end = f.seek(0, os.SEEK_END)
            start = max(0, end - nbytes)
            f.seek(start)
            data = f.read(end - start)
    except OSError:
        return ""
    if start > 0:
        nl = data.find(b"\n")
        data = data[nl + 1:] if nl >= 0 else b""
    return data.decode(errors="replace")


def read_start(path: Path, nbytes: int = 64 << 10) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(nbytes).decode(errors="replace")
    except OSError:
        return ""


def tail_of(path: Path, lines: int = STDERR_TAIL_LINES, most: int = 8 << 20) -> str:
    """`useful_tail` of a log, read from its end: 64 KiB first, more while the useful
    lines are fewer than asked (torch's debug lines dropped), never more than `most`."""
    nbytes = 64 << 10
    while True:
        try:
            size = path.stat().st_size
        except OSError:
            return ""
        got = useful_tail(read_end(path, nbytes), lines)
        if nbytes >= size or nbytes >= most or got.count("\n") + 1 >= lines:
            return got
        nbytes *= 4


# torch's own log lines below WARNING (TORCH_LOGS, "V1124 14:20:44.123000 1234 path:line]")
_TORCH_DEBUG = re.compile(r"^(\[rank\d+\]:)?[VDI]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ ")
# pytest's log capture of torch's structured trace ("DEBUG    torch.__trace:utils.py:2350 "):
# the plugin's own observation (child/probe.py), which a phase of an older plugin, or a
# test that sets the trace logger up again, lets through to pytest's capture
_TRACE_CAPTURE = re.compile(r"^(DEBUG|INFO) +torch\.__trace:\S+:\d+ ")
_CAPTURED_LOG = re.compile(r"^-+ Captured log \w+ -+$")
# the phase's own pytest footer: what follows is pytest's summary of the phase, not the cause
_PYTEST_FOOTER = re.compile(r"^=+ (short test summary info|warnings summary) =+$")


def useful_tail(text: str, lines: int = STDERR_TAIL_LINES) -> str:
    """The last lines of a phase's output that say what went wrong: torch's debug and info
    log lines, pytest's capture of the plugin's trace observation and the phase's pytest
    footer dropped; the user's traceback kept, and what the process said before a
    faulthandler dump."""
    out = [line for line in text.rstrip().splitlines()
           if not _TORCH_DEBUG.match(line) and not _TRACE_CAPTURE.match(line + " ")]
    # a log capture section that held only those lines says nothing
    out = [line for i, line in enumerate(out) if not _CAPTURED_LOG.match(line)
           or (i + 1 < len(out) and not out[i + 1].startswith(("=", "-", "_")))]
    footer = [i for i, line in enumerate(out) if _PYTEST_FOOTER.match(line)]
    after = out[footer[0]:] if footer else []
    crashed_after = any(line.startswith(("Fatal Python error", "INTERNALERROR",
                                         "Exception ignored")) for line in after)
    if footer and footer[0] > 0 and not crashed_after:  # a crash at exit stays in view
        out = out[:footer[0]]
    start = max(0, len(out) - lines)
    hung = [i for i, line in enumerate(out) if line.startswith("Timeout (")]
    if hung:  # a hung phase's stacks (child/phase.py), innermost frames first: their head
        t = hung[-1]
        rest = len(out) - (t + lines // 2)
        return "\n".join(out[max(0, t - 10):t + lines // 2]
                         + ([f"... ({rest} more line(s) of its stacks in the log)"]
                            if rest > 0 else []))
    fatal = [i for i, line in enumerate(out) if line.startswith("Fatal Python error")]
    if fatal:  # keep what the process said before faulthandler's dump
        start = min(start, max(0, fatal[-1] - 10))
    return "\n".join(out[start:])
