"""Compile once, load on N (`compile_cache(compile_once=N)`), in a phase child: the one
compiling process's fake process group of world size N (itself rank 0), and torch's
compile_on_one_rank switched on in every process of the check, as torchtitan's
experiments/graph_trainer/precompile_main.py precompiles and its ranks then run.

compile_on_one_rank is part of the program under test here (without it a distributed
graph bakes in the tracing rank's coordinates, process groups and device), so every
phase of the check runs with it, the loaders and their own fresh compiles alike. torch
has it under two names: torch.distributed.config (2.13, where it makes DeviceMesh
coordinates and process groups graph inputs) and torch.compiler.config (2.15, where
make_fx and Inductor read it too, and the FX graph key holds it); the second wins.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Optional, Tuple

from pytest_compilecache.terms import FAKE_WORLD_ENV, ONCE_ENV

# where torch keeps the switch, newest first: (module, what the record names it)
_CONFIGS = (("torch.compiler.config", "torch.compiler.config.compile_on_one_rank"),
            ("torch.distributed.config", "torch.distributed.config.compile_on_one_rank"))


def coor_config() -> Optional[Tuple[Any, str]]:
    """torch's compile_on_one_rank config module and its full name, or None."""
    import importlib
    import warnings

    for module_name, named in _CONFIGS:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        with warnings.catch_warnings():  # 2.15's torch.distributed name is a deprecated alias
            warnings.simplefilter("ignore")
            if hasattr(module, "compile_on_one_rank"):
                return module, named
    return None


def missing(version: str) -> str:
    """Why a compile-once check cannot run on this torch: the version and the API."""
    return (f"torch {version} has no compile_on_one_rank (neither "
            f"torch.compiler.config.compile_on_one_rank, as torch 2.15 has, nor "
            f"torch.distributed.config.compile_on_one_rank, as torch 2.13 has): one "
            f"process cannot compile a distributed program for every rank")


def prepare(record: Dict[str, Any], rank: int) -> bool:
    """In a process of a compile-once check: compile_on_one_rank on, and in the
    compiling process the fake group; True where that process has made its group."""
    if os.environ.get(ONCE_ENV) != "1":
        return False
    found = coor_config()
    if found is not None:
        setattr(found[0], "compile_on_one_rank", True)
        record["compile_on_one_rank"] = found[1]
    world = os.environ.get(FAKE_WORLD_ENV)
    if not world:
        return False
    import torch.distributed as dist

    dist.init_process_group("fake", rank=rank, world_size=int(world))
    record.update(backend="fake", world_size=int(world))
    return True
