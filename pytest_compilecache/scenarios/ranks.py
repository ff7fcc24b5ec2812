"""The ranks of one job over one cache (--compile-cache-ranks=N, ini compile_cache_ranks):
the `ranks` path alone, each check's phases run as N ranks (paths/ranks.py). A check's
marker `compile_cache(ranks=N)` switches it on for that check alone
(controller/fleet.paths_for reads the marker where `value` reads the settings)."""
from __future__ import annotations

import argparse
from typing import Any, Mapping, Optional

from pytest_compilecache.scenarios.base import ALONE, Scenario


def parse_ranks(value: str) -> int:
    """The ranks of each phase: an integer from 1."""
    return parse_count(value, "ranks")


def parse_count(value: str, what: str) -> int:
    """A number of processes (ranks, replicas): an integer from 1."""
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: the number of {what}, an integer from 1")
    return n


class Ranks(Scenario):
    name = "ranks"
    switch = "ranks"
    stands_in = ALONE
    parse = staticmethod(parse_ranks)
    metavar = "N"
    help = ("run each check's phases as N ranks started together, as torchrun starts a "
            "node's (env rendezvous; gloo on CPU, NCCL on CUDA with one GPU per rank), the "
            "process group created around the test: cold and warm over one root the ranks "
            "share, then each rank over its own; a check's compile_cache(ranks=N) marker "
            "sets its own")

    def usage_error(self, on: Mapping[str, Any], values: Mapping[str, Any]) -> Optional[str]:
        others = [name for name in on if name != self.name]
        if others:
            return (f"--compile-cache-ranks runs every check as ranks over one cache; it goes "
                    f"with no other scenario (also on: {', '.join(others)}): run them in "
                    f"separate sessions")
        return None
