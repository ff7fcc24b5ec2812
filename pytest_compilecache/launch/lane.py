"""One preloaded interpreter (forkserver.py) as the controller holds it: its process,
started with its own temp and cache dirs, and the pipes of its line protocol (hello,
preload, fork, exit status). `preloaded.PreloadedLauncher` decides which lane serves a
phase; a lane serves one at a time, and another phase's thread may send it a preload.
"""
from __future__ import annotations

import contextlib
import json
import os
import queue
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

from pytest_compilecache.launch.descendants import kill_below
from pytest_compilecache.launch.phaselog import read_end
from pytest_compilecache.lifetime import child_preexec

# what each interpreter keeps in its own dir: whatever its imports write
PHASE_OWN = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TMPDIR")
START_TIMEOUT_S = 600.0


class Starter:
    """The thread every preloaded interpreter is started from, where the caller is not
    the main thread: a child is told when the thread that started it ends
    (`child_preexec`'s parent-death signal), and a rank's thread ends with its phase,
    which would end an interpreter started from it. This one lives with the process."""

    def __init__(self) -> None:
        self._calls: "queue.Queue[Tuple[Callable[[], Any], queue.Queue]]" = queue.Queue()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()

    def call(self, fn: Callable[[], Any]) -> Any:
        if threading.current_thread() is threading.main_thread():
            return fn()
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, daemon=True,
                                                name="compilecache-lane-starter")
                self._thread.start()
        answer: queue.Queue = queue.Queue(1)
        self._calls.put((fn, answer))
        ok, value = answer.get()
        if not ok:
            raise value
        return value

    def _serve(self) -> None:
        while True:
            fn, answer = self._calls.get()
            try:
                answer.put((True, fn()))
            except BaseException as e:  # the caller's to raise
                answer.put((False, e))


STARTER = Starter()


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
        argv = [sys.executable, "-m", "pytest_compilecache.launch.forkserver", str(self.log),
                *(["--bare"] if bare else []),
                *(["--bytecode", str(bytecode)] if bytecode is not None else [])]
        self.proc: subprocess.Popen = STARTER.call(lambda: subprocess.Popen(
            argv, env=self.env, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, start_new_session=True, preexec_fn=child_preexec))
        self.fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        self._unread = b""  # read from the pipe, not yet taken (`receive`)
        self.hello: Optional[Dict[str, Any]] = None
        self.pending = 0  # preload requests whose hello is still to be read
        # the phase's thread reads; another phase's thread may send it a preload
        self.lock = threading.RLock()
        self.gone = False  # its pipe closed
        self.fd_lock = threading.Lock()  # held to read the pipe, and to close it
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
        """What the pipe has, waiting at most a second at a time; None at the deadline,
        at its end, or once the lane is closed (`gone`, by another thread: what was
        written before is still read; a closed descriptor, whose number may already name
        another file, is not waited on again)."""
        while True:
            gone, left = self.gone, self._left(deadline)
            wait = 0.0 if gone or left == 0.0 else min(left or 1.0, 1.0)
            with self.fd_lock:  # never a descriptor `close` closed
                chunk = self._chunk(wait)
            if chunk == b"":  # its end
                self.gone = True
                return None
            if chunk or gone or left == 0.0:
                return chunk

    def _chunk(self, wait: float) -> Optional[bytes]:
        """Under `fd_lock`: what the pipe has; None: nothing yet; b"": its end, or
        closed."""
        out = self.proc.stdout
        if out is None or out.closed:
            return b""
        try:
            if not select.select([self.fd], [], [], wait)[0]:
                return None
            return os.read(self.fd, 1 << 16)
        except (OSError, ValueError):
            return b""

    @staticmethod
    def _left(deadline: Optional[float]) -> Optional[float]:
        return None if deadline is None else max(0.0, deadline - time.perf_counter())

    def send(self, msg: Dict[str, Any]) -> None:
        stdin: IO[bytes] = self.proc.stdin  # type: ignore[assignment]
        with self.lock:  # a line at a time
            stdin.write((json.dumps(msg) + "\n").encode())
            stdin.flush()

    def _log_tail(self) -> str:
        try:
            return (" | ".join(read_end(self.log, 8192).strip().splitlines()[-5:])
                    if self.log.exists() else "(no log)")
        except OSError:
            return "(no log)"

    def close(self) -> None:
        """Killed: it compiled nothing and holds nothing to save. Not waited for: at a
        session's end one is often still importing what the last phase asked it to
        preload (the model's library, learned on a first run), and the second the
        session waited for it to notice its closed stdin was BERT's (an H200)."""
        self.gone = True  # a thread still waiting on its pipe stops (`_read`)
        with contextlib.suppress(OSError):
            if self.proc.stdin:
                self.proc.stdin.close()
        kill_below(self.proc.pid)  # what an interrupted phase left, in a session of its own
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        if self.proc.stdout:  # under -W error an unclosed pipe fails the user's session
            with self.fd_lock:  # a reader's select waits a second at most
                self.proc.stdout.close()
