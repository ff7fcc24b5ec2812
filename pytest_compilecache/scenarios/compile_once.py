"""Compile once, load on N (--compile-cache-compile-once=N, ini
compile_cache_compile_once): the `compile_once` path alone, each check compiled by one
process for N ranks, then loaded by the N ranks (paths/compile_once.py). A check's
marker `compile_cache(compile_once=N)` switches it on for that check alone
(controller/fleet.paths_for reads the marker where `value` reads the settings)."""
from __future__ import annotations

from typing import Any, Mapping, Optional

from pytest_compilecache.scenarios.base import ALONE, Scenario
from pytest_compilecache.scenarios.ranks import parse_count


def parse_once(value: str) -> int:
    """The ranks that load the one compile: an integer from 1."""
    return parse_count(value, "ranks")


class CompileOnce(Scenario):
    name = "compile_once"
    switch = "compile-once"
    stands_in = ALONE
    parse = staticmethod(parse_once)
    metavar = "N"
    help = ("run each check's body compiled once, by one process in a fake process group of "
            "N ranks with torch's compile_on_one_rank, then as N ranks started together "
            "that load it over its cache, then each rank over a fresh cache of its own, the "
            "reference its outputs are held to; a check's compile_cache(compile_once=N) "
            "marker sets its own")

    def usage_error(self, on: Mapping[str, Any], values: Mapping[str, Any]) -> Optional[str]:
        others = [name for name in on if name != self.name]
        if others:
            return (f"--compile-cache-compile-once runs every check compiled once and loaded "
                    f"by N ranks; it goes with no other scenario (also on: "
                    f"{', '.join(others)}): run them in separate sessions")
        return None
