"""Recording keys only (--compile-cache-keys-only): the `keys` path alone, ahead of the
manifest-only recording when both are on."""
from __future__ import annotations

from typing import Any, Mapping, Optional

from pytest_compilecache.scenarios.base import Scenario
from pytest_compilecache.scenarios.record import recording_error


class KeysOnly(Scenario):
    name = "keys"
    switch = "keys-only"
    help = ("record the key manifests from cold runs stopped once their keys are "
            "computed, before Inductor's code generation, kernel compiles and "
            "autotuning (the model then runs uncompiled): the keys of a full cold run "
            "in a fraction of its time; no warm run, no verdict; the recordings run "
            "side by side, one per device slot. Where torch cannot "
            "stop there, the check says so and compiles in full")

    def usage_error(self, on: Mapping[str, Any], values: Mapping[str, Any]) -> Optional[str]:
        return recording_error(self.switch, values)
