"""Named instants of a check session, for the report's `timeline` (seconds since the
controller process started): where the session's wall time goes around its phases (the
controller's start, collection, the preloaded interpreters' imports, the wait for them,
what the controller does between and after the phases). Only speed reads it.
No pytest, no torch: the preloaded interpreter uses it too.
"""
from __future__ import annotations

import os
import time
from typing import Dict, Iterable, Optional, Tuple


def process_start() -> float:
    """The wall-clock time (time.time()) at which this process started: its start time
    in /proc (Linux), else now."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return time.time() - uptime + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return time.time()


class Timeline:
    """Instants by name (the first of each name is kept), from this process's start."""

    def __init__(self) -> None:
        self.start = process_start()
        self.marks: Dict[str, float] = {}

    def mark(self, name: str, at: Optional[float] = None) -> None:
        self.marks.setdefault(name, time.time() if at is None else at)

    def add(self, marks: Iterable[Tuple[str, float]], prefix: str = "") -> None:
        for name, at in marks:
            self.mark(prefix + name, at)

    def instants(self) -> Dict[str, float]:
        """Every instant as wall-clock time, this process's `start` among them: what an
        xdist worker hands its controller (their starts differ)."""
        return {"start": self.start, **self.marks}

    def to_json(self) -> Dict[str, float]:
        """Seconds since the process started, in order."""
        return {k: round(v - self.start, 3)
                for k, v in sorted(self.marks.items(), key=lambda kv: kv[1])}
