"""A path whose phases may run as several processes at once over one cache (the fleet's
programs, issue 51): each PhasePlan says whether it is one process or the path's N
started together (`fleet`), and whether those N form one process group
(`process_group`). controller/fleet.py runs each phase with its own count; every
process has its own record (`cold.r0`, `warm.r1`, ...: judge/ranks.py's rank_phase),
judged per process by the path."""
from __future__ import annotations

from typing import Any

from pytest_compilecache.judge.ranks import RANKS, Fleet
from pytest_compilecache.paths.base import PhasePlan
from pytest_compilecache.paths.local import LocalRestart


class FleetRestart(LocalRestart):
    """A restart over one cache whose phases are run by one or N processes each."""
    noun = "process"  # what one of the N is called in errors and notes: rank, replica
    summary = ""  # not a --compile-cache-via value: a marker's ranks=N, replicas=N, ...
    selectable = False
    fleet: Fleet = RANKS  # what the rules say of one (judge/ranks.py)
    storable = False  # its root holds every process's entries: not one process's restart
    records_keys = False  # its phases are per process (cold.r0 ...): no one cold run's keys
    layout = ""  # how each process sees the GPUs: "" the session's --compile-cache-rank-layout

    def __init__(self, size: int = 2) -> None:
        self.size = size

    @classmethod
    def from_settings(cls, settings: Any) -> "FleetRestart":
        return cls(int(getattr(settings, cls.name, 2) or 2))

    def processes(self, plan: PhasePlan) -> int:
        """How many processes run the phase at once: N, or one."""
        return self.size if plan.fleet else 1
