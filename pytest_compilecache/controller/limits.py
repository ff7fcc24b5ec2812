"""How long a phase may run before its process group is killed.

`--compile-cache-timeout=S` sets every phase's limit. Without it, a phase that compiles
(a check's first phase, of minutes for a large model under max-autotune; a fresh compile,
the repeat run, the deploy scenario's run of another commit's code) gets 1800 s, and a
phase that starts warm from the first phase's caches on the same code 4x the first
phase's seconds, at least 300 s: such a start is shorter than the compile it starts
from, even one that recompiles everything, so a hung warm phase ends in minutes instead
of half an hour, and its message says whose limit it hit.
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
           first_s: Optional[float], warm_start: bool = True) -> "PhaseLimit":
        """`given`: the option's value, or None; `first_s`: the first phase's process
        seconds (None while it is the one to run, or it has none); `warm_start`: the
        phase starts from what the first phase built, on the same code. One that
        compiles from scratch or runs other code (the deploy scenario's phases after the
        baseline's cold one, a fresh compile, the repeat run, a variants' turn) may
        compile longer than the first phase did, and gets a first phase's default."""
        if given is not None:
            return cls(given, "raise --compile-cache-timeout")
        if phase == first or first_s is None or not warm_start:
            return cls(DEFAULT_TIMEOUT_S, "the default for a phase that compiles; raise "
                                          "--compile-cache-timeout")
        seconds = min(DEFAULT_TIMEOUT_S, max(LATER_FLOOR_S, LATER_FACTOR * first_s))
        return cls(seconds, f"the default after the {first} phase: {LATER_FACTOR:.0f}x its "
                            f"{first_s:.0f} s, at least {LATER_FLOOR_S:.0f} s; "
                            f"--compile-cache-timeout=S sets every phase's")
