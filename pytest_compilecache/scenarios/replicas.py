"""Replicas of one model over one cache (--compile-cache-replicas=N, ini
compile_cache_replicas): the `replicas` path alone, each check cold as one process and
warm as N at once over the root it built (paths/replicas.py). A check's marker
`compile_cache(replicas=N)` switches it on for that check alone
(controller/fleet.paths_for reads the marker where `value` reads the settings)."""
from __future__ import annotations

from typing import Any, Mapping, Optional

from pytest_compilecache.scenarios.base import ALONE, Scenario
from pytest_compilecache.scenarios.ranks import parse_count


def parse_replicas(value: str) -> int:
    """The replicas warm at once: an integer from 1."""
    return parse_count(value, "replicas")


class Replicas(Scenario):
    name = "replicas"
    switch = "replicas"
    stands_in = ALONE
    parse = staticmethod(parse_replicas)
    metavar = "N"
    help = ("run each check cold as one process, then warm as N replicas started together "
            "over the cache it built (no process group; on CUDA one GPU each, seen as "
            "cuda:0), then each replica over a fresh cache of its own, the reference its "
            "warm outputs are held to; a check's compile_cache(replicas=N) marker sets its "
            "own")

    def usage_error(self, on: Mapping[str, Any], values: Mapping[str, Any]) -> Optional[str]:
        others = [name for name in on if name != self.name]
        if others:
            return (f"--compile-cache-replicas runs every check as replicas over one cache; "
                    f"it goes with no other scenario (also on: {', '.join(others)}): run "
                    f"them in separate sessions")
        return None
