"""The Redis server of the `remote` path: a private `redis-server` per session (bound to
127.0.0.1 on a free port, no persistence, its own directory, stopped with the session
and on its launcher's death), or the user's own (--compile-cache-redis=HOST:PORT).

pytest-free and client-free: the controller speaks the three commands it needs (PING,
FLUSHALL, DBSIZE) over a socket; only the phase children need the `redis` package,
because torch's remote caches import it.
"""
from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Dict, Optional, Tuple

from pytest_compilecache.paths.base import PathUnavailable

INSTALL_HINT = ("install the server with your distribution's package (Debian/Ubuntu: "
                "apt-get install redis-server) and the client with "
                "pip install redis (from a checkout: pip install -e '.[remote]')")


class RedisUnavailable(PathUnavailable):
    """No server to check the remote path with, or the server stopped answering: the
    check is an `error` naming the server (before the session: a usage error)."""


def parse_address(value: str) -> Tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r}: expected HOST:PORT, e.g. 127.0.0.1:6379")
    return host, int(port)


def command(host: str, port: int, *words: str, timeout: float = 2.0) -> str:
    """One RESP command; the first line of the reply ('+PONG', ':3', '-ERR ...')."""
    req = f"*{len(words)}\r\n" + "".join(f"${len(w.encode())}\r\n{w}\r\n" for w in words)
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(req.encode())
        reply = b""
        while not reply.endswith(b"\r\n"):
            chunk = s.recv(4096)
            if not chunk:
                break
            reply += chunk
    return reply.decode(errors="replace").strip()


def alive(host: str, port: int) -> bool:
    return why_silent(host, port) is None


def why_silent(host: str, port: int, timeout: float = 1.0) -> Optional[str]:
    """Why no Redis server answers PING at host:port (refused, timed out, another
    reply), or None when one does: the words a user can act on."""
    try:
        reply = command(host, port, "PING", timeout=timeout)
    except socket.timeout:
        return f"no reply within {timeout:g} s"
    except OSError as e:
        return e.strerror or str(e) or type(e).__name__
    if reply == "+PONG":
        return None
    return (f"it replied {reply[:200]!r} to PING, not +PONG" if reply else
            "it closed the connection without a reply")


class RedisServer:
    """A server the remote path writes through to. `owned`: started here, flushed
    before each check's cold phase (nobody else's entries), stopped by close()."""

    def __init__(self, host: str, port: int, proc: Optional["subprocess.Popen[bytes]"] = None,
                 workdir: Optional[Path] = None) -> None:
        self.host, self.port, self.proc, self.workdir = host, port, proc, workdir

    @property
    def owned(self) -> bool:
        return self.proc is not None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def env(self) -> Dict[str, str]:
        return {"TORCHINDUCTOR_REDIS_HOST": self.host, "TORCHINDUCTOR_REDIS_PORT": str(self.port)}

    def flush(self) -> None:
        if self.owned:
            try:
                command(self.host, self.port, "FLUSHALL")
            except OSError as e:
                raise RedisUnavailable(self.gone(e.strerror or str(e))) from None

    def ensure_answers(self, when: str) -> None:
        """Before a phase: a server that stopped answering (killed, shut down, out of
        memory) would make torch's remote caches miss silently (torch drops a refused
        connection and reads a miss), which would read as a verdict on the model."""
        why = why_silent(self.host, self.port)
        if why:
            raise RedisUnavailable(self.gone(why, when))

    def gone(self, why: str, when: str = "") -> str:
        """The message of a server that stopped answering, naming it and the fix."""
        whose = ("the plugin's private redis-server" if self.owned
                 else "your Redis server (--compile-cache-redis)")
        fix = ("see its log in " + str(self.workdir / "redis.log") if self.owned and
               self.workdir is not None else "restart it (or leave --compile-cache-redis out "
               "to let the plugin start a private one) and run the check again")
        return (f"{whose} at {self.address} stopped answering{' ' + when if when else ''} "
                f"({why}): a fault of the server, not a verdict on the model; {fix}")

    def keys(self) -> Optional[int]:
        try:
            reply = command(self.host, self.port, "DBSIZE")
        except OSError:
            return None
        return int(reply[1:]) if reply.startswith(":") else None

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    @classmethod
    def users(cls, value: str) -> "RedisServer":
        host, port = parse_address(value)
        why = why_silent(host, port)
        if why:
            raise RedisUnavailable(unreachable(value, why))
        return cls(host, port)

    @classmethod
    def start(cls, timeout: float = 20.0) -> "RedisServer":
        from pytest_compilecache.leftovers import mark_owner
        from pytest_compilecache.lifetime import child_preexec

        exe = shutil.which("redis-server")
        if exe is None:
            raise RedisUnavailable("the remote path needs a redis-server on PATH: "
                                   + INSTALL_HINT)
        workdir = Path(tempfile.mkdtemp(prefix="compilecache-redis-"))
        workdir.chmod(0o700)
        mark_owner(workdir)  # a killed session's is found by `clean`
        port = _free_port()
        proc = subprocess.Popen(
            [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
             "no", "--dir", str(workdir), "--protected-mode", "yes", "--loglevel", "warning"],
            stdout=open(workdir / "redis.log", "wb"), stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, preexec_fn=child_preexec)
        server = cls("127.0.0.1", port, proc, workdir)
        deadline = time.monotonic() + timeout
        while not alive("127.0.0.1", port):
            if proc.poll() is not None or time.monotonic() > deadline:
                log = (workdir / "redis.log").read_text(errors="replace")[-2000:]
                server.close()
                raise RedisUnavailable(f"redis-server did not start on 127.0.0.1:{port}:\n{log}")
            time.sleep(0.05)
        return server


def unreachable(value: str, why: str) -> str:
    """A named server that does not answer: the usage error's line."""
    return (f"--compile-cache-redis={value}: no Redis server answers PING there ({why}); "
            f"start it (redis-server --port PORT), fix HOST:PORT, or leave "
            f"--compile-cache-redis out to let the plugin start a private redis-server")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
