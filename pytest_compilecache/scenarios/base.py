"""The scenario interface: what turns a warm-start path on and how it stands in. Pure
Python, no judge or torch import, so that --help and the settings read every scenario's
switch without importing a path module (the path it names is imported when a session
plans its checks)."""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

# how a scenario stands in: the session's only path, or the local restart's place among
# --compile-cache-via's paths (its phases and more)
ALONE = "alone"
FOR_LOCAL = "local"


class Scenario:
    """One way of running the checks, switched on for the session by an option.

    `name` is the registry key and the warm-start path it runs (paths/<name>.py or a
    path a conftest registers); `switch` its option, `--compile-cache-<switch>` with the
    ini twin `compile_cache_<switch>` (a flag, or a value when `parse` is set; `bare` is
    the value of the option given without one), stored under `dest` in the settings and
    the JSON report's "settings"; `stands_in` ALONE or FOR_LOCAL.

    Seams left for the next scenarios (not built here): a scenario switched on per check
    by the marker (`@pytest.mark.compile_cache(ranks=2)`) would read the marker where
    `value` reads the settings, and a phase of N processes started together (ranks,
    replicas) belongs to the path the scenario names (`PhasePlan`), not to this class.
    """
    name = ""
    switch = ""
    help = ""
    parse: Optional[Callable[[str], Any]] = None  # None: a flag
    metavar = "VALUE"
    bare: Any = None
    stands_in = ALONE

    @property
    def dest(self) -> str:
        return self.switch.replace("-", "_")

    def usage_error(self, on: Mapping[str, Any], values: Mapping[str, Any]) -> Optional[str]:
        """What this scenario cannot run with (`on`: the scenarios switched on, by name;
        `values`: the other settings), as a usage error naming the options."""
        return None

