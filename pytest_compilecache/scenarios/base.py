"""The scenario interface: what turns a warm-start path on and how it stands in. Pure
Python, no judge or torch import, so that --help and the settings read every scenario's
switch without importing a path module (the path it names is imported when a session
plans its checks)."""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Tuple

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

    A scenario switched on per check by the marker (`@pytest.mark.compile_cache(ranks=2)`)
    has it read where `value` reads the settings (controller/fleet.paths_for), and how
    many processes run each phase, and whether they form a process group, belongs to
    the path the scenario names (`PhasePlan.fleet`, `.process_group`: paths/fleet.py),
    not to this class.
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

    def inherited_env(self) -> Tuple[str, ...]:
        """The environment variables that hand its session directories to the sessions
        it starts (xdist workers, recordings): checked (adopted.from_env) before the
        session makes a directory of its own."""
        return ()

    def open(self, session: Any) -> None:
        """The controller's session starts with it switched on: make what its checks
        share (a directory its workers are handed), after the up-front checks."""

    def close(self, session: Any) -> None:
        """The controller's session ends: remove what `open` made, unless a check over
        it failed (its result names it) or --compile-cache-keep."""

    def usage_error(self, on: Mapping[str, Any], values: Mapping[str, Any]) -> Optional[str]:
        """What this scenario cannot run with (`on`: the scenarios switched on, by name;
        `values`: the other settings), as a usage error naming the options."""
        return None

