"""How long a phase may run before its process group is killed.

`--compile-cache-timeout=S` sets every phase's limit. Without it, a check's first phase
(the cold compile, of minutes for a large model under max-autotune) gets 1800 s, and
each later phase 4x the first phase's seconds, at least 300 s: a warm start is shorter
than the compile it starts from, even one that recompiles everything, so a hung warm
phase ends in minutes instead of half an hour, and its message says whose limit it hit.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from pytest_compilecache.options import DEFAULT_TIMEOUT_S

LATER_FACTOR = 4.0
LATER_FLOOR_S = 300.0


@dataclass(frozen=True)
class PhaseLimit:
    seconds: float
    said: str  # why this limit, and how to change it: the timeout message's end

    @classmethod
    def of(cls, given: Optional[float], first: str, phase: str,
           first_s: Optional[float]) -> "PhaseLimit":
        """`given`: the option's value, or None; `first_s`: the first phase's process
        seconds (None while it is the one to run, or it has none)."""
        if given is not None:
            return cls(given, "raise --compile-cache-timeout")
        if phase == first or first_s is None:
            return cls(DEFAULT_TIMEOUT_S, "the default for a first phase; raise "
                                          "--compile-cache-timeout")
        seconds = min(DEFAULT_TIMEOUT_S, max(LATER_FLOOR_S, LATER_FACTOR * first_s))
        return cls(seconds, f"the default after the {first} phase: {LATER_FACTOR:.0f}x its "
                            f"{first_s:.0f} s, at least {LATER_FLOOR_S:.0f} s; "
                            f"--compile-cache-timeout=S sets every phase's")
