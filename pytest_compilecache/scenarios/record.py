"""Recording key manifests (--compile-cache-manifest-only): the `record` path alone."""
from __future__ import annotations

from typing import Any, Mapping, Optional

from pytest_compilecache.scenarios.base import Scenario


class Record(Scenario):
    name = "record"
    switch = "manifest-only"
    help = ("record the key manifests from cold runs only: no warm run, no "
            "verdict; the recordings run side by side, one per device slot")

    def usage_error(self, on: Mapping[str, Any], values: Mapping[str, Any]) -> Optional[str]:
        return recording_error(self.switch, values)


def recording_error(switch: str, values: Mapping[str, Any]) -> Optional[str]:
    """A recording has no warm run: what needs one is a usage error."""
    if values.get("store_caches"):
        return ("--compile-cache-store-caches keeps the caches of checks that pass a "
                f"warm start of this commit; drop --compile-cache-{switch}")
    if tuple(values.get("via") or ("local",)) != ("local",):
        return ("--compile-cache-via checks warm starts of this commit; it goes with "
                f"neither --compile-cache-baseline-warm nor --compile-cache-{switch}")
    return None
