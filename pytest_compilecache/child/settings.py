"""Where each cache layer's switch got its value in a phase (runs in the child): the
test's code during the workload, code before it (a conftest, a fixture, a module it
imports), the environment, or torch's default. A service that runs the same code gets
the same switch, so code that turns a cache off is a finding, where an environment
variable is this run's own choice. Read at the workload's start and end: what the
user's code left is what counts. No pytest; torch's config modules imported lazily."""
from __future__ import annotations

import importlib
import os
from typing import Any, Dict, Iterable, Optional

from pytest_compilecache.layers.base import (CONFIG_MODULES, DEFAULT, SET_BY_ENV, SET_IN_CODE,
                                             SET_IN_PHASE, Switch)

_UNREAD = object()


# the settings that turn every cache off, lookups included: a compile under them
# leaves no cache event at all
FORCE_DISABLE = (Switch("inductor", "force_disable_caches"),
                 Switch("compiler", "force_disable_caches"))


def forced_now() -> Optional[str]:
    """The force_disable_caches setting that is on now, or None."""
    return next((s.setting for s in FORCE_DISABLE if _value(_module(s), s) is True), None)


class SwitchWatch:
    """start() before the workload, origins() after it; stop() takes its compile
    watch off."""

    def __init__(self, switches: Iterable[Switch]) -> None:
        self.switches = list(dict.fromkeys(switches))
        self.started: Dict[str, Any] = {}
        self.forced_while_compiling: Optional[str] = None  # seen at a compile's start
        self._watch: Any = None

    def start(self) -> None:
        self.started = {s.setting: _value(_module(s), s) for s in self.switches}
        self.stop()
        self.forced_while_compiling = None
        self._watch_compiles()

    def _watch_compiles(self) -> None:
        """force_disable_caches set only around a compile (a `config.patch` in the
        body) is gone when the workload ends and leaves no event: read as each
        compile starts (Dynamo's start callback; it changes nothing)."""
        try:
            from torch._dynamo.callback import callback_handler
        except Exception:  # a torch without it: the end's value only
            return

        def seen(_args: Any) -> None:
            self.forced_while_compiling = self.forced_while_compiling or forced_now()

        callback_handler.register_start_callback(seen)
        self._watch = (callback_handler, seen)

    def stop(self) -> None:
        if self._watch is not None:
            handler, seen = self._watch
            handler.remove_start_callback(seen)
            self._watch = None

    def origins(self) -> Dict[str, str]:
        """Each switch's setting -> where its value now came from."""
        return {s.setting: origin(s, self.started.get(s.setting, _UNREAD))
                for s in self.switches}


def origin(switch: Switch, started: Any = _UNREAD) -> str:
    """Changed since the workload started: set during the phase. Else torch's own
    record of the value (its config entry, torch 2.6+): an environment variable that
    forces it, a value set in code, an environment variable that defaults it. Where
    torch keeps no such record, the environment variable the switch names."""
    module = _module(switch)
    value = _value(module, switch)
    if value is _UNREAD:
        return DEFAULT
    if started is not _UNREAD and value != started:
        return SET_IN_PHASE
    entry = (getattr(module, "_config", None) or {}).get(switch.name)
    if entry is not None and hasattr(entry, "user_override"):
        unset = _unset()
        if getattr(entry, "env_value_force", unset) is not unset:
            return SET_BY_ENV  # torch lets no code override it
        override = entry.user_override
        if hasattr(override, "get") and not isinstance(override, dict):  # a ContextVar (2.8+)
            override = override.get()
        if override is not unset:
            return SET_IN_CODE
        return SET_BY_ENV if getattr(entry, "env_value_default", unset) is not unset else DEFAULT
    return SET_BY_ENV if switch.env and os.environ.get(switch.env) is not None else DEFAULT


def _module(switch: Switch) -> Optional[Any]:
    try:
        return importlib.import_module(CONFIG_MODULES[switch.config])
    except Exception:
        return None


def _value(module: Optional[Any], switch: Switch) -> Any:
    try:
        return getattr(module, switch.name, _UNREAD) if module is not None else _UNREAD
    except Exception:
        return _UNREAD


def _unset() -> Any:
    """torch's marker of a config value nobody set."""
    try:
        from torch.utils import _config_module

        return getattr(_config_module, "_UNSET_SENTINEL", _UNREAD)
    except Exception:
        return _UNREAD
