"""The deploy scenario (--compile-cache-baseline-warm): the `deploy` path alone."""
from __future__ import annotations

from typing import Any, Mapping, Optional

from pytest_compilecache.scenarios.base import Scenario


class Deploy(Scenario):
    name = "deploy"
    switch = "baseline-warm"
    help = ("the deploy scenario: cold run at --compile-cache-baseline's REF (in a "
            "worktree, or REF's caches a session there kept with "
            "--compile-cache-store-caches), warm run here on REF's caches, every "
            "layer must hit, and its outputs must equal a fresh compile of this "
            "commit's")

    def usage_error(self, on: Mapping[str, Any], values: Mapping[str, Any]) -> Optional[str]:
        if not values.get("baseline"):
            return ("--compile-cache-baseline-warm needs --compile-cache-baseline=REF "
                    "(the revision whose caches the warm run starts from)")
        if "keys" in on or "record" in on:
            return (f"--compile-cache-baseline-warm needs a warm run; drop "
                    f"{_recording(on)}")
        if values.get("store_caches"):
            return ("--compile-cache-store-caches keeps the caches of checks that pass a "
                    "warm start of this commit; drop --compile-cache-baseline-warm (its "
                    "caches are the baseline's)")
        if tuple(values.get("via") or ("local",)) != ("local",):
            return ("--compile-cache-via checks warm starts of this commit; it goes with "
                    "neither --compile-cache-baseline-warm nor --compile-cache-manifest-only")
        return None


def _recording(on: Mapping[str, Any]) -> str:
    return ("--compile-cache-keys-only" if "keys" in on else
            "--compile-cache-manifest-only")
