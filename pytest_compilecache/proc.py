"""The process table as Linux's /proc shows it: each process's parent, group and state,
the processes below one, a process's command line. Elsewhere it is empty. Read by the
launchers (launch/descendants.py: what a phase left running) and by lifetime.py (signals
and priorities for this process's children). No pytest, no torch, nothing of the package.
"""
from __future__ import annotations

import os
from typing import Dict, List, NamedTuple


class Proc(NamedTuple):
    ppid: int
    pgid: int
    state: str


def table() -> Dict[int, Proc]:
    """Every process: ppid, process group, state (Linux /proc; empty elsewhere)."""
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return {}
    out = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[pid] = Proc(int(fields[1]), int(fields[2]), fields[0])
        except (OSError, ValueError, IndexError):
            continue
    return out


def children(pid: int) -> List[int]:
    return [p for p, info in table().items() if info.ppid == pid]


def kids_of(procs: Dict[int, Proc]) -> Dict[int, List[int]]:
    kids: Dict[int, List[int]] = {}
    for pid, info in procs.items():
        kids.setdefault(info.ppid, []).append(pid)
    return kids


def subtrees(roots: List[int], kids: Dict[int, List[int]]) -> List[int]:
    """`roots` and every process below them."""
    found, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += kids.get(pid, [])
    return found


def below(pid: int) -> List[int]:
    """Every process below `pid`, as one read of /proc found them."""
    kids = kids_of(table())
    return subtrees(kids.get(pid, []), kids)


def describe(pid: int, width: int = 60) -> str:
    """`sleep 600 (pid 1234)`: the command line, shortened."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
        if not cmd:
            with open(f"/proc/{pid}/comm") as f:
                cmd = f"[{f.read().strip()}]"
    except OSError:
        cmd = "?"
    if len(cmd) > width:
        cmd = cmd[:width - 3] + "..."
    return f"{cmd} (pid {pid})"
