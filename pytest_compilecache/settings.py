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
    baseline_warm: bool = False
    repeat: bool = False
    manifest_only: bool = False
    keys_only: bool = False
    store_caches: bool = False
    trend: int = 10  # commits of history the report shows (history/trend.py)
    trend_alert: float = 2.0
    gpus: str = "auto"
    jobs_per_gpu: int = 2
    lock_dir: Optional[str] = None
    lease_timeout: float = 7200.0
    shard: Optional[Tuple[int, int]] = None
    shard_times: Optional[str] = None
    warm_on_other_gpu: str = ""  # "" (off), "index" or "pinned" (OTHER_GPU_LAYOUTS)
    share_variants: bool = False
    ranks: int = 1  # processes of a check's phases (its marker's ranks=N sets its own)
    rank_layout: str = "index"  # how a rank sees its GPU (OTHER_GPU_LAYOUTS)
    via: Tuple[str, ...] = ("local",)
    # the values of the options warm-start paths add (PathOption), by name
    path_options: Tuple[Tuple[str, Any], ...] = ()
    launcher: str = "preloaded"
    launcher_state: Optional[str] = None  # None: the default dir; "none": nothing kept

    def path_option(self, name: str) -> Any:
        """The value of a warm-start path's own option (None: not given)."""
        return dict(self.path_options).get(name)

    @classmethod
    def from_config(cls, config: Any) -> "Settings":
        values: dict = {}
        for name, _, default, parser, _ in _VALUED:
            dest = name.replace("-", "_")
            v = config.getoption("compile_cache_" + dest)
            if v is None and name not in NO_INI:
                raw = config.getini("compile_cache_" + dest)
                if raw not in (None, "", []):  # pytest < 8 reads an unset string ini as []
                    try:
                        v = parser(str(raw))
                    except argparse.ArgumentTypeError as e:
                        raise ValueError(f"ini option compile_cache_{dest}: {e}") from None
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
        for name, _ in _FLAGS:
            dest = name.replace("-", "_")
            values[dest] = _flag(config, dest)
        if values["baseline_warm"] and not values.get("baseline"):
            raise ValueError("--compile-cache-baseline-warm needs --compile-cache-baseline=REF "
                             "(the revision whose caches the warm run starts from)")
        if values["share_variants"] and values.get("warm_on_other_gpu"):
            raise ValueError("--compile-cache-share-variants and --compile-cache-warm-on-other-"
                             "gpu each stand in for the local restart: run them in separate "
                             "sessions")
        # a session that only records keys (both flags: keys-only records them faster)
        recording = ("--compile-cache-keys-only" if values["keys_only"] else
                     "--compile-cache-manifest-only" if values["manifest_only"] else None)
        if values["share_variants"] and (values["baseline_warm"] or recording):
            raise ValueError("--compile-cache-share-variants needs the warm-start check; drop "
                             + ("--compile-cache-baseline-warm (the deploy scenario compares "
                                "commits: run it in a session of its own)"
                                if values["baseline_warm"] else str(recording)))
        if values["store_caches"]:
            other = ("--compile-cache-baseline-warm (its caches are the baseline's)"
                     if values["baseline_warm"] else recording)
            if other:
                raise ValueError(f"--compile-cache-store-caches keeps the caches of checks that "
                                 f"pass a warm start of this commit; drop {other}")
            if (values.get("store") or "").lower() == "none":
                raise ValueError("--compile-cache-store-caches keeps the caches in the key "
                                 "manifest store: --compile-cache-store=none leaves none")
        if values["baseline_warm"] and recording:
            raise ValueError(f"--compile-cache-baseline-warm needs a warm run; drop {recording}")
        if values.get("via", ("local",)) != ("local",) and (values["baseline_warm"] or recording):
            raise ValueError("--compile-cache-via checks warm starts of this commit; it goes "
                             "with neither --compile-cache-baseline-warm nor "
                             + (recording or "--compile-cache-manifest-only"))
        if "local" not in values.get("via", ("local",)) and (values.get("baseline")
                                                            or values["repeat"]):
            raise ValueError("--compile-cache-baseline and --compile-cache-repeat compare the "
                             "keys of the local restart's cold run: add local to "
                             "--compile-cache-via")
        return cls(check=_flag(config, "check"), **values)


def default_threads() -> int:
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return os.cpu_count() or 1
