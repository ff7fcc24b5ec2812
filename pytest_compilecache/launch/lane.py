"""One preloaded interpreter (forkserver.py) as the controller holds it: its process,
started with its own temp and cache dirs, and the pipes of its line protocol (hello,
preload, fork, exit status). `preloaded.PreloadedLauncher` decides which lane serves a
phase; a lane serves one at a time, and another phase's thread may send it a preload.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any, Dict, Mapping, Optional, Sequence

from pytest_compilecache.launch.descendants import kill_below
from pytest_compilecache.launch.phaselog import read_end
from pytest_compilecache.lifetime import child_preexec

# what each interpreter keeps in its own dir: whatever its imports write
PHASE_OWN = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TMPDIR")
START_TIMEOUT_S = 600.0


class Lane:
    """One preloaded interpreter (forkserver.py) and its pipes."""

    def __init__(self, env: Mapping[str, str], cwd: str, home: Path, index: int,
                 extras: Sequence[str] = (), bare: bool = False,
                 bytecode: Optional[Path] = None) -> None:
        own = Path(tempfile.mkdtemp(prefix=f"lane{index}-", dir=home))
        self.args = (env, cwd, home, index)
        self.bytecode = bytecode
        self.env = dict(env)
        for k in PHASE_OWN:  # whatever the preload writes stays in its own dir
            self.env[k] = str(own)
        self.log = own / "server.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pytest_compilecache.launch.forkserver", str(self.log)]
            + (["--bare"] if bare else [])
            + (["--bytecode", str(bytecode)] if bytecode is not None else []),
            env=self.env, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, start_new_session=True, preexec_fn=child_preexec)
        self.fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        self._unread = b""  # read from the pipe, not yet taken (`receive`)
        self.hello: Optional[Dict[str, Any]] = None
        self.pending = 0  # preload requests whose hello is still to be read
        # the phase's thread reads; another phase's thread may send it a preload
        self.lock = threading.RLock()
        self.gone = False  # its pipe closed
        if extras:
            self.preload(extras)

    def preload(self, modules: Sequence[str]) -> None:
        """Queued: the server reads it once its own imports are done (or its phase has
        ended). A lane already closed (replaced by a bare one) is left as it is."""
        with self.lock:
            try:
                self.send({"preload": list(modules)})
            except (OSError, ValueError):
                return
            self.pending += 1

    def took(self, hello: Dict[str, Any]) -> None:
        """A preload's hello, read where the next message was awaited."""
        with self.lock:
            self.hello = hello
            self.pending = max(0, self.pending - 1)

    def settled(self) -> bool:
        """Its imports and every preload sent so far are done (as far as read)."""
        return self.hello is not None and not self.pending

    def step(self, deadline: Optional[float]) -> bool:
        """Read the next hello if it comes before `deadline`: the first says the imports
        are done, each later one a preload; False when none came or the server is gone."""
        got = self.receive(deadline)
        if got is None:
            return False
        if self.hello is None:
            self.hello = got
        else:
            self.took(got)
        return True

    def ready(self) -> Dict[str, Any]:
        """The latest hello: after the imports and every preload sent so far."""
        while not self.settled():
            if not self.step(time.perf_counter() + START_TIMEOUT_S):
                self.hello, self.pending = {"problem": "the preloaded interpreter did not "
                                            "start: " + self._log_tail()}, 0
                break
        return self.hello  # type: ignore[return-value]

    def receive(self, deadline: Optional[float]) -> Optional[Dict[str, Any]]:
        """The next message; None when the server is gone (`gone`) or the deadline passed.
        Read from the pipe's descriptor into a buffer of our own: a buffered reader's
        `readline` takes two messages written together and leaves the second where
        `select` cannot see it."""
        while b"\n" not in self._unread:
            chunk = self._read(deadline)
            if not chunk:
                return None
            self._unread += chunk
        line, _, self._unread = self._unread.partition(b"\n")
        return json.loads(line)

    def _read(self, deadline: Optional[float]) -> Optional[bytes]:
        """What the pipe has, at most a second at a time (a lane closed by another
        thread ends the wait: its descriptor is never read after `close`, when the
        number may already name another file); None at the deadline or when gone."""
        while not self.gone:
            left = None if deadline is None else deadline - time.perf_counter()
            if left is not None and left <= 0:
                return None
            try:
                if not select.select([self.fd], [], [], min(left or 1.0, 1.0))[0]:
                    continue
                chunk = os.read(self.fd, 1 << 16)
            except (OSError, ValueError):  # closed under it
                chunk = b""
            if chunk:
                return chunk
            self.gone = True
        return None

    def send(self, msg: Dict[str, Any]) -> None:
        stdin: IO[bytes] = self.proc.stdin  # type: ignore[assignment]
        with self.lock:  # a line at a time
            stdin.write((json.dumps(msg) + "\n").encode())
            stdin.flush()

    def _log_tail(self) -> str:
        try:
            return " | ".join(read_end(self.log, 8192).strip().splitlines()[-5:]) \
                if self.log.exists() else "(no log)"
        except OSError:
            return "(no log)"

    def close(self) -> None:
        """It exits when its stdin closes; one busy importing a preload is killed (it
        holds nothing to save)."""
        self.gone = True  # a thread still waiting on its pipe stops (`_read`)
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=1)
        except (OSError, subprocess.TimeoutExpired):
            pass
        kill_below(self.proc.pid)  # what an interrupted phase left, in a session of its own
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        if self.proc.stdout:  # under -W error an unclosed pipe fails the user's session
            self.proc.stdout.close()
