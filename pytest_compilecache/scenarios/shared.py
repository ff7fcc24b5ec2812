"""Variants over one cache (--compile-cache-share-variants): the `shared` path in the
local restart's place."""
from __future__ import annotations

from typing import Any, Mapping, Optional

from pytest_compilecache.scenarios.base import FOR_LOCAL, Scenario


class ShareVariants(Scenario):
    name = "shared"
    switch = "share-variants"
    stands_in = FOR_LOCAL
    help = ("also run the variants of each test function (its parametrized "
            "instances) over one cache they share, one after another, as a service "
            "serving them all from one cache dir; fail when a variant loads an "
            "entry another wrote and computes other numbers (a false hit)")

    def usage_error(self, on: Mapping[str, Any], values: Mapping[str, Any]) -> Optional[str]:
        if "other_gpu" in on:
            return ("--compile-cache-share-variants and --compile-cache-warm-on-other-gpu "
                    "each stand in for the local restart: run them in separate sessions")
        if "deploy" in on:
            return ("--compile-cache-share-variants needs the warm-start check; drop "
                    "--compile-cache-baseline-warm (the deploy scenario compares commits: "
                    "run it in a session of its own)")
        for name, switch in (("keys", "keys-only"), ("record", "manifest-only")):
            if name in on:
                return ("--compile-cache-share-variants needs the warm-start check; drop "
                        f"--compile-cache-{switch}")
        return None
