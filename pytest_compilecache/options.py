"""Command-line / ini options and the frozen Settings the core works from.

The core never sees a pytest Config: `Settings.from_config` is the only bridge.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple

DEVICES = ("auto", "cpu", "cuda")
DEFAULT_TIMEOUT_S = 1800.0


def parse_device(value: str) -> str:
    v = value.strip().lower()
    if v not in DEVICES:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a device; use one of {', '.join(DEVICES)}")
    return v


def parse_timeout(value: str) -> float:
    try:
        v = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"timeout must be > 0 seconds, got {value!r}")
    return v


def parse_tolerance(value: str) -> Optional[Tuple[float, float]]:
    """'bitwise' (default) or 'ATOL[,RTOL]' for warm-vs-cold output comparison."""
    v = value.strip().lower()
    if v in ("", "bitwise", "default", "0"):
        return None
    parts = v.split(",")
    try:
        atol = float(parts[0])
        rtol = float(parts[1]) if len(parts) > 1 else 0.0
    except (ValueError, IndexError):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a tolerance; use 'bitwise' or ATOL[,RTOL], e.g. 1e-6,1e-5") from None
    if len(parts) > 2 or atol < 0 or rtol < 0:
        raise argparse.ArgumentTypeError(f"{value!r}: use ATOL[,RTOL] with values >= 0")
    return (atol, rtol)


def parse_threads(value: str) -> int:
    try:
        v = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a thread count") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"thread count must be >= 1, got {value!r}")
    return v


# name, ini type, default, parser, help
_VALUED = (
    ("report", "string", None, str,
     "write a versioned JSON report of every compile-cache check to PATH"),
    ("device", "string", "auto", parse_device,
     "device the checks compile for: auto (CUDA when available, else CPU), cpu or cuda"),
    ("timeout", "string", str(DEFAULT_TIMEOUT_S), parse_timeout,
     "seconds one phase (cold or warm) of a check may run before its process group is killed"),
    ("warm-tolerance", "string", "bitwise", parse_tolerance,
     "how warm outputs must match cold ones: bitwise (default) or ATOL[,RTOL] for a "
     "nondeterministic kernel"),
    ("eager-tolerance", "string", "default", parse_tolerance,
     "how compiled outputs must match eager ones: default (torch.testing.assert_close's "
     "dtype-aware tolerances) or ATOL[,RTOL]"),
    ("threads", "string", None, parse_threads,
     "CPU thread count fixed for both phases (OMP_NUM_THREADS; part of the cache key on "
     "torch 2.13); default: OMP_NUM_THREADS or the core count"),
    ("root", "string", None, str,
     "directory under which each check's private cache root is created (default: the "
     "system temp dir)"),
)


def add_options(addoption: Callable[..., Any], addini: Optional[Callable[..., Any]] = None,
                prefix: str = "compile-cache-") -> None:
    """Register the options with any argparse-like `addoption` (pytest group or CLI)."""
    addoption(f"--{prefix}check", action="store_true", dest="compile_cache_check",
              default=False,
              help="compile every compile_cache check twice, cold then warm, in fresh "
                   "processes, and fail when a cache layer does not hit")
    addoption(f"--{prefix}keep", action="store_true", dest="compile_cache_keep",
              default=False, help="keep every check's cache root (default: keep failing ones)")
    for name, _, _, parser, help_ in _VALUED:
        addoption(f"--{prefix}{name}", dest="compile_cache_" + name.replace("-", "_"),
                  default=None, type=parser, metavar=name.split("-")[-1].upper(), help=help_)
    if addini is not None:
        for name, kind, default, _, help_ in _VALUED:
            if name == "report":
                continue
            addini("compile_cache_" + name.replace("-", "_"), help=help_, type=kind,
                   default=default)


@dataclass(frozen=True)
class Settings:
    check: bool = False
    keep: bool = False
    report: Optional[str] = None
    device: str = "auto"
    timeout: float = DEFAULT_TIMEOUT_S
    warm_tolerance: Optional[Tuple[float, float]] = None
    eager_tolerance: Optional[Tuple[float, float]] = None
    threads: int = 1
    root: Optional[str] = None

    @classmethod
    def from_config(cls, config: Any) -> "Settings":
        values: dict = {}
        for name, _, default, parser, _ in _VALUED:
            dest = name.replace("-", "_")
            v = config.getoption("compile_cache_" + dest)
            if v is None and name != "report":
                raw = config.getini("compile_cache_" + dest)
                if raw not in (None, ""):
                    try:
                        v = parser(str(raw))
                    except argparse.ArgumentTypeError as e:
                        raise ValueError(f"ini option compile_cache_{dest}: {e}") from None
            if v is not None:
                values[dest] = v
        if "threads" not in values:
            values["threads"] = default_threads()
        return cls(check=bool(config.getoption("compile_cache_check")),
                   keep=bool(config.getoption("compile_cache_keep")), **values)


def default_threads() -> int:
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return os.cpu_count() or 1
