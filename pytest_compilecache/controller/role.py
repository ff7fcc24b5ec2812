"""Which process this is, computed once at configure: the plain pytest controller, an
xdist controller (runs no phase, reports), an xdist worker (runs checks, hands each
result to its controller), or a phase child (runs one phase of one check)."""
from __future__ import annotations

import enum
import os
from typing import Any

from pytest_compilecache.isolation import CHILD_SPEC_ENV


class Role(enum.Enum):
    CONTROLLER = "controller"
    XDIST_CONTROLLER = "xdist controller"
    WORKER = "xdist worker"
    PHASE = "phase child"

    @property
    def runs_phases(self) -> bool:
        return self in (Role.CONTROLLER, Role.WORKER)

    @property
    def reports(self) -> bool:
        """Writes the report and the terminal summary (a worker hands its results on)."""
        return self in (Role.CONTROLLER, Role.XDIST_CONTROLLER)


def role_of(config: Any) -> Role:
    if os.environ.get(CHILD_SPEC_ENV):
        return Role.PHASE
    if getattr(config, "workerinput", None) is not None:
        return Role.WORKER
    if getattr(config.option, "numprocesses", None):  # -n N: xdist's workers run the checks
        return Role.XDIST_CONTROLLER
    return Role.CONTROLLER
