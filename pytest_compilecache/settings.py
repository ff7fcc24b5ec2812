"""The session's settings, read once from the command line and the ini file (options.py
declares them): every other module reads a `Settings`, never pytest's config, so that
the rules are testable without a pytest session, and a combination that makes no sense
is one usage error up front."""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Any, Optional, Tuple

from pytest_compilecache.options import _FLAGS, _VALUED, NO_INI


def _flag(config: Any, dest: str) -> bool:
    """A flag given on the command line, else its ini twin."""
    if config.getoption("compile_cache_" + dest):
        return True
    try:
        return bool(config.getini("compile_cache_" + dest))
    except KeyError:  # a config without the ini options registered
        return False
    except ValueError as e:  # not a boolean: a usage error naming the option
        raise ValueError(f"ini option compile_cache_{dest}: {e}") from None


@dataclass(frozen=True)
class Settings:
    check: bool = False
    keep: bool = False
    report: Optional[str] = None
    device: str = "auto"
    timeout: Optional[float] = None  # None: controller/limits.py's defaults
    warm_tolerance: Optional[Tuple[float, float]] = None
    eager_tolerance: Optional[Tuple[float, float]] = None
    job_id: str = "inherit"
    threads: int = 1
    root: Optional[str] = None
    store: Optional[str] = None
    baseline: Optional[str] = None
    allow_drift: Tuple[str, ...] = ()
    accept: Tuple[str, ...] = ()
    select: Optional[str] = None
    repeat: bool = False
    store_caches: bool = False
    trend: int = 10  # commits of history the report shows (history/trend.py)
    trend_alert: float = 2.0
    gpus: str = "auto"
    jobs_per_gpu: int = 2
    lock_dir: Optional[str] = None
    lease_timeout: float = 7200.0
    shard: Optional[Tuple[int, int]] = None
    shard_times: Optional[str] = None
    rank_layout: str = "index"  # how a rank sees its GPU (OTHER_GPU_LAYOUTS)
    via: Tuple[str, ...] = ("local",)
    # the values of the options warm-start paths add (PathOption), by name
    path_options: Tuple[Tuple[str, Any], ...] = ()
    launcher: str = "preloaded"
    launcher_state: Optional[str] = None  # None: the default dir; "none": nothing kept

    # the scenarios switched on (scenarios/), by name, with their switch's value
    scenarios: Tuple[Tuple[str, Any], ...] = ()

    def scenario(self, name: str) -> Any:
        """A scenario's value (True for a flag), None where it is off."""
        return dict(self.scenarios).get(name)

    # what the report's "settings", the history and the leases read, by their old names
    baseline_warm = property(lambda self: bool(self.scenario("deploy")))
    keys_only = property(lambda self: bool(self.scenario("keys")))
    manifest_only = property(lambda self: bool(self.scenario("record")))
    share_variants = property(lambda self: bool(self.scenario("shared")))
    warm_on_other_gpu = property(lambda self: self.scenario("other_gpu") or "")
    ranks = property(lambda self: int(self.scenario("ranks") or 1))
    replicas = property(lambda self: int(self.scenario("replicas") or 1))
    compile_once = property(lambda self: int(self.scenario("compile_once") or 1))

    def path_option(self, name: str) -> Any:
        """The value of a warm-start path's own option (None: not given)."""
        return dict(self.path_options).get(name)

    @classmethod
    def from_config(cls, config: Any, reg: Optional[Any] = None) -> "Settings":
        """`reg`: the scenarios (default: the built-in ones) whose switches it reads."""
        from pytest_compilecache import scenarios

        reg = scenarios.builtin() if reg is None else reg
        values = _valued(config)
        for name, _ in _FLAGS:
            dest = name.replace("-", "_")
            values[dest] = _flag(config, dest)
        on = _switched_on(config, reg)
        problem = scenarios.usage_error(on, values, reg) or _usage_error(values)
        if problem:
            raise ValueError(problem)
        return cls(check=_flag(config, "check"), scenarios=tuple(on.items()), **values)


def _valued(config: Any) -> dict:
    values: dict = {}
    for name, _, default, parser, _ in _VALUED:
        dest = name.replace("-", "_")
        v = config.getoption("compile_cache_" + dest)
        if v is None and name not in NO_INI:
            v = _ini_value(config, dest, parser)
        if v is not None:
            values[dest] = v
    if "threads" not in values:
        values["threads"] = default_threads()
    # paths are the invocation dir's, fixed now: a test module that chdirs at import
    # must not move the cache roots, the report or the locks
    here = str(getattr(getattr(config, "invocation_params", None), "dir", "") or os.getcwd())
    for dest in ("root", "report", "lock_dir", "shard_times", "launcher_state"):
        if values.get(dest) and values[dest].strip().lower() != "none":
            values[dest] = os.path.normpath(os.path.join(here, os.path.expanduser(values[dest])))
    return values


def _ini_value(config: Any, dest: str, parser: Any) -> Any:
    raw = config.getini("compile_cache_" + dest)
    if raw in (None, "", []):  # pytest < 8 reads an unset string ini as []
        return None
    try:
        return parser(str(raw))
    except argparse.ArgumentTypeError as e:
        raise ValueError(f"ini option compile_cache_{dest}: {e}") from None


def _switched_on(config: Any, reg: Any) -> dict:
    """The scenarios whose switch is given, on the command line or in the ini."""
    on = {}
    for name, scenario in reg.items():
        if scenario.parse is None:
            value: Any = _flag(config, scenario.dest)
        else:
            value = config.getoption("compile_cache_" + scenario.dest, None)
            if value is None:
                value = _ini_value(config, scenario.dest, scenario.parse)
        if value:
            on[name] = value
    return on


def _usage_error(values: dict) -> Optional[str]:
    """The rules between settings that no scenario owns."""
    if values["store_caches"] and (values.get("store") or "").lower() == "none":
        return ("--compile-cache-store-caches keeps the caches in the key "
                "manifest store: --compile-cache-store=none leaves none")
    if "local" not in values.get("via", ("local",)) and (values.get("baseline")
                                                        or values["repeat"]):
        return ("--compile-cache-baseline and --compile-cache-repeat compare the "
                "keys of the local restart's cold run: add local to "
                "--compile-cache-via")
    return None


def default_threads() -> int:
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return os.cpu_count() or 1
