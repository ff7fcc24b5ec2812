"""Command-line / ini options and the frozen Settings the core works from.

The core never sees a pytest Config: `Settings.from_config` is the only bridge.
"""
from __future__ import annotations

import argparse
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


def _count(value: str, what: str) -> int:
    try:
        v = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a {what}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{what} must be >= 1, got {value!r}")
    return v


def parse_threads(value: str) -> int:
    return _count(value, "thread count")


def parse_patterns(value: str) -> Tuple[str, ...]:
    """Comma- or newline-separated patterns (* and ?) of key component names."""
    return tuple(p.strip() for p in value.replace("\n", ",").split(",") if p.strip())


def parse_layers(value: str) -> Tuple[str, ...]:
    """Comma-separated cache layers (--compile-cache-accept)."""
    from pytest_compilecache.layers import LAYERS, unknown_layers

    names = parse_patterns(value)
    wrong = unknown_layers(names, LAYERS)
    if wrong:
        raise argparse.ArgumentTypeError(wrong)
    return names


def parse_gpus(value: str) -> str:
    from pytest_compilecache.gpulist import parse_gpus as parse

    try:
        parse(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value.strip() or "auto"


def parse_jobs(value: str) -> int:
    return _count(value, "number of jobs per GPU")


def parse_trend(value: str) -> int:
    """How many commits the trend shows: 0 (none) or more."""
    return 0 if value.strip() == "0" else _count(value, "number of commits")


def parse_alert(value: str) -> float:
    try:
        v = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a multiple, e.g. 2 for 200%") from None
    if not v > 1:
        raise argparse.ArgumentTypeError(f"the alert multiple must be > 1, got {value!r}")
    return v


def parse_shard(value: str) -> Tuple[int, int]:
    """'I/N' with 1 <= I <= N: this machine's slice of the checks."""
    try:
        i, n = (int(x) for x in value.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a shard; use I/N, e.g. 2/4") from None
    if not 1 <= i <= n:
        raise argparse.ArgumentTypeError(f"shard {value!r}: need 1 <= I <= N")
    return (i, n)


def parse_job_id(value: str) -> str:
    """inherit (default), per-check, or a job id to give every check's phases."""
    v = value.strip()
    if v in ("", "inherit"):
        return "inherit"
    if v.startswith("mast:"):
        raise argparse.ArgumentTypeError(f"{value!r}: torch reserves job ids starting 'mast:'")
    if any(c.isspace() for c in v):
        raise argparse.ArgumentTypeError(f"{value!r}: a job id has no whitespace")
    return v


def parse_via(value: str) -> Tuple[str, ...]:
    """Comma-separated warm-start paths, each checked for every check; the names are
    checked against the paths' registry at configure (a plugin may add some)."""
    names = tuple(dict.fromkeys(p.strip().lower() for p in value.split(",") if p.strip()))
    if not names:
        raise argparse.ArgumentTypeError(f"{value!r}: name at least one warm-start path")
    return names


def _via_help() -> str:
    from pytest_compilecache import paths

    return paths.via_help()


LAUNCHERS = ("preloaded", "fresh")
def parse_rank_layout(value: str) -> str:
    """How each rank of a multi-rank check sees its GPU: the words of
    --compile-cache-warm-on-other-gpu's layouts."""
    from pytest_compilecache.scenarios.other_gpu import OTHER_GPU_LAYOUTS

    v = value.strip().lower()
    if v not in OTHER_GPU_LAYOUTS:
        raise argparse.ArgumentTypeError(
            f"{value!r}: the layouts are index (every rank sees the ranks' GPUs, rank r on "
            f"cuda:<local rank>) and pinned (each rank sees only its GPU, as cuda:0)")
    return v


def parse_launcher(value: str) -> str:
    v = value.strip().lower()
    if v not in LAUNCHERS:
        raise argparse.ArgumentTypeError(f"{value!r}: the launchers are {', '.join(LAUNCHERS)}")
    return v


# name, ini type, default, parser, help
_VALUED: Tuple[Tuple[str, str, Any, Any, Any], ...] = (
    ("report", "string", None, str,
     "write a versioned JSON report of every compile-cache check to PATH"),
    ("device", "string", "auto", parse_device,
     "device the checks compile for: auto (CUDA when available, else CPU), cpu or cuda"),
    ("timeout", "string", None, parse_timeout,
     "seconds one phase (cold or warm) of a check may run before its process group is "
     f"killed (default: {DEFAULT_TIMEOUT_S:.0f} for a phase that compiles; 4x the first "
     "phase's seconds, at least 300, for one that starts warm from its caches)"),
    ("warm-tolerance", "string", "bitwise", parse_tolerance,
     "how warm outputs must match cold ones: bitwise (default) or ATOL[,RTOL] for a "
     "nondeterministic kernel"),
    ("eager-tolerance", "string", "default", parse_tolerance,
     "how compiled outputs must match eager ones: default (torch.testing.assert_close's "
     "dtype-aware tolerances) or ATOL[,RTOL]"),
    ("job-id", "string", "inherit", parse_job_id,
     "the PGO job id the phases run with: inherit (default: the user's "
     "TORCH_COMPILE_JOB_ID or none, as production starts), per-check (one the plugin "
     "makes per check), or VALUE for a deployment that sets one which CI does not"),
    ("via", "string", "local", parse_via, _via_help),
    ("launcher", "string", "preloaded", parse_launcher,
     "how a phase process starts: preloaded (default: forked from an interpreter that has "
     "imported torch and pytest, as fresh as a restart for torch's caches; a phase a fork "
     "cannot start so runs fresh, with a note saying why) or fresh (a new interpreter "
     "per phase)"),
    ("launcher-state", "string", None, str,
     "directory where the preloaded launcher keeps what makes the next session's "
     "interpreters ready sooner: the installed libraries this session's tests imported, "
     "and, where Python writes no bytecode (PYTHONDONTWRITEBYTECODE) and torch was "
     "installed without it, the bytecode of what its interpreters import (default: "
     "$XDG_CACHE_HOME/pytest-compilecache, else ~/.cache/pytest-compilecache; 'none' keeps "
     "nothing)"),
    ("threads", "string", None, parse_threads,
     "CPU thread count fixed for both phases (OMP_NUM_THREADS; part of the cache key on "
     "torch 2.13); default: OMP_NUM_THREADS or the core count"),
    ("root", "string", None, str,
     "directory under which each check's private cache root is created (default: the "
     "system temp dir)"),
    ("store", "string", None, str,
     "directory of the per-commit key manifests (default: .compilecache at the git "
     "repository's root, else the rootdir; 'none' records nothing)"),
    ("baseline", "string", None, str,
     "compare every check's cache keys with those of git revision REF (recorded in a "
     "temporary worktree when the store has none) and fail on drift"),
    ("allow-drift", "string", None, parse_patterns,
     "key components that may change against the baseline, as comma-separated patterns "
     "with * and ? wildcards (e.g. 'inductor_config[*]'); '*' reports drift without failing"),
    ("accept", "string", None, parse_layers,
     "cache layers whose miss every check accepts as a known warm-start cost, e.g. "
     "dynamo_pgo for a service that runs no PGO job id: shown as `accepted` with its "
     "reasons, not failed (one check: @pytest.mark.compile_cache_accept('dynamo_pgo', "
     "reason='...'))"),
    ("trend", "string", "10", parse_trend,
     "commits of warm-start history the report, the job summary and `pytest-compilecache "
     "trend` show: each clean commit's checks in the store, their cold and warm seconds, "
     "layer states and keys (0: none)"),
    ("trend-alert", "string", "2", parse_alert,
     "flag a check whose warm/cold share rose to this multiple of the commit before's "
     "(default 2: twice it); a layer from hit to miss and changed keys are always flagged"),
    ("gpus", "string", "auto", parse_gpus,
     "GPUs the checks run on: auto (CUDA_VISIBLE_DEVICES, else every GPU; CUDA is never "
     "initialised to find them) or a list such as 0,1,3"),
    ("jobs-per-gpu", "string", "2", parse_jobs,
     "concurrent checks per GPU, under xdist, and recordings per GPU in a keys-only or "
     "manifest-only session (compiles are mostly CPU work: on 2 H200s, 2 per GPU "
     "ran 8 models in 127 s against 213 s with 1; lower it for models that fill a GPU)"),
    ("lock-dir", "string", None, str,
     "directory of the device-slot locks; share it between sessions on one host (default: "
     "a private directory per session, shared by its xdist workers)"),
    ("lease-timeout", "string", "7200", parse_timeout,
     "seconds a phase may wait for a free device slot before it errors"),
    ("rank-layout", "string", None, parse_rank_layout,
     "how the ranks of a multi-rank check (--compile-cache-ranks, compile_cache(ranks=N)) "
     "see their GPUs: index (default: every rank sees the ranks' GPUs and runs on "
     "cuda:<local rank>) or pinned (each rank sees only its GPU, as cuda:0, through its "
     "own CUDA_VISIBLE_DEVICES)"),
    ("shard", "string", None, parse_shard,
     "run only slice I of N of the checks (I/N), for a CI matrix; merge the reports with "
     "`pytest-compilecache merge`"),
    ("shard-times", "string", None, str,
     "a previous JSON report: balance --compile-cache-shard by its recorded times"),
    ("select", "string", None, str,
     "(internal) JSON file listing the node ids a recording session runs"),
)
# what --help shows after "=" where the option's last word would not say it
_METAVARS = {"jobs-per-gpu": "K", "rank-layout": "index|pinned",
             "launcher": "preloaded|fresh", "launcher-state": "DIR|none",
             "via": "PATHS",
             "job-id": "inherit|per-check|VALUE", "baseline": "REF",
             "allow-drift": "PATTERNS", "accept": "LAYERS",
             "shard": "I/N", "shard-times": "REPORT", "select": "FILE",
             "trend": "N", "trend-alert": "X",
             "warm-tolerance": "ATOL,RTOL", "eager-tolerance": "ATOL,RTOL"}
_FLAGS = (
    ("keep", "keep every check's cache root (default: keep failing ones)"),
    ("store-caches", "keep each passing check's compile caches in the key manifest store, "
                     "under this commit and environment (the newest 3 commits): the deploy "
                     "scenario of a later commit (--compile-cache-baseline-warm) then warms "
                     "its code over them instead of compiling the baseline in a worktree. "
                     "For main's runs; the caches are code: never restore them from an "
                     "untrusted source"),
    ("repeat", "run a second cold compile in a relocated cache root and working directory "
               "and fail on any cache-key difference (a nondeterministic key)"),
)

# Options with no ini twin: `select` is how a recording session is told its checks (no
# user sets it), so it is also hidden from --help.
NO_INI = ("select",)
CHECK_HELP = ("compile every compile_cache check twice, cold then warm, in fresh processes, "
              "and fail when a cache layer does not hit")


def add_options(addoption: Callable[..., Any], addini: Optional[Callable[..., Any]] = None,
                prefix: str = "compile-cache-") -> None:
    """Register the options with any argparse-like `addoption` (pytest group or CLI), and
    each one's ini twin `compile_cache_<name>` with `addini` (except NO_INI); the
    scenarios' switches come from their modules (scenarios/)."""
    from pytest_compilecache import scenarios

    addoption(f"--{prefix}check", action="store_true", dest="compile_cache_check",
              default=False, help=CHECK_HELP)
    for name, help_ in _FLAGS:
        addoption(f"--{prefix}{name}", action="store_true",
                  dest="compile_cache_" + name.replace("-", "_"), default=False, help=help_)
    for name, _, default, parser, help_ in _VALUED:
        text = help_() if callable(help_) else help_  # derived from a registry
        shown = argparse.SUPPRESS if name in NO_INI else (
            text + (f" (default: {default})" if default not in (None, "")
                    and "default" not in text else ""))
        addoption(f"--{prefix}{name}", dest="compile_cache_" + name.replace("-", "_"),
                  default=None, type=parser,
                  metavar=_METAVARS.get(name, name.split("-")[-1].upper()), help=shown)
    if addini is not None:
        for name, help_ in (("check", CHECK_HELP), *_FLAGS):
            addini("compile_cache_" + name.replace("-", "_"), help=help_, type="bool",
                   default=False)
        for name, kind, default, _, help_ in _VALUED:
            if name not in NO_INI:
                addini("compile_cache_" + name.replace("-", "_"),
                       help=help_() if callable(help_) else help_, type=kind,
                       default=default)
    for scenario in scenarios.builtin().values():
        add_switch(scenario, addoption, addini, prefix)


def add_switch(scenario: Any, addoption: Callable[..., Any],
               addini: Optional[Callable[..., Any]], prefix: str = "compile-cache-") -> None:
    """A scenario's switch: a flag, or a value (bare: `scenario.bare`), and its ini twin."""
    dest = "compile_cache_" + scenario.dest
    if scenario.parse is None:
        addoption(f"--{prefix}{scenario.switch}", action="store_true", dest=dest,
                  default=False, help=scenario.help)
    else:
        bare = {"nargs": "?", "const": scenario.bare} if scenario.bare is not None else {}
        addoption(f"--{prefix}{scenario.switch}", dest=dest, default=None,
                  type=scenario.parse, metavar=scenario.metavar, help=scenario.help, **bare)
    if addini is not None:
        addini(dest, help=scenario.help, default=None if scenario.parse else False,
               type="string" if scenario.parse else "bool")


def core_dests() -> set:
    """The dests of pytest-compilecache's own options: a path's option may not take one."""
    from pytest_compilecache import scenarios

    return {"compile_cache_check", *("compile_cache_" + n.replace("-", "_") for n, _ in _FLAGS),
            *("compile_cache_" + v[0].replace("-", "_") for v in _VALUED),
            *("compile_cache_" + s.dest for s in scenarios.builtin().values())}
