"""The plugin-free truth for compile once, load on N: one process compiles, N load.

Issue 51 point 3's verdicts are held against this: no plugin. Each body in bodies/ runs
in three launches over cache dirs (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR under it):

  once     ONE process over a fresh shared dir: for a distributed body, a fake process
           group of world size N, itself rank 0 (dist.init_process_group("fake", ...)),
           as torchtitan's experiments/graph_trainer/precompile_main.py precompiles;
           for a replica body, no group
  load     N processes over that dir, started together: the ranks of the real job
           (torchrun, gloo) or N replicas (N plain processes, no group)
  private  the same N processes again, each over a fresh dir of its own: what each
           loader's own compile gives (the reference its loaded outputs are held to)

    python benchmarks/fleet/plain_once.py [BODY ...] [--nproc 2] [--no-coor] [--keep DIR]

Every launch runs with TORCH_DISTRIBUTED_COMPILE_ON_ONE_RANK=1
(torch.distributed.config.compile_on_one_rank: DeviceMesh coordinates and process
groups become graph inputs, not the tracing rank's constants) where this torch has that
config; --no-coor runs without it. Bodies: all_reduce (a compiled step with a functional
all_reduce in its graph), ddp, tp_mlp, rank_blind_pass (plain_pair.py's) and replica_mlp
(an MLP's inference, no process group: the replica form).

It prints one row per body, launch and rank, as plain_pair.py does: FX graph and
AOTAutograd cache hits/misses, the outputs, the output against the private launch's
same rank (bitwise), a verdict (FALSE HIT: it hit, and differs from its own compile)
and the launch's wall seconds.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch

from plain_pair import compared, outputs, read_ranks, verdict

BODIES = ("all_reduce", "ddp", "tp_mlp", "rank_blind_pass", "replica_mlp")
REPLICAS = ("replica_mlp",)  # bodies with no process group: loaded by N plain processes
LAUNCHES = ("once", "load", "private")
HERE = Path(__file__).resolve().parent


def coor_name() -> str:
    """Where this torch keeps compile_on_one_rank ("" where it has none): 2.15's
    torch.compiler.config, or 2.13's torch.distributed.config (2.15's deprecated alias)."""
    import importlib
    import warnings

    for name in ("torch.compiler.config", "torch.distributed.config"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if hasattr(module, "compile_on_one_rank"):
                return f"{name}.compile_on_one_rank"
    return ""


def base_env(root: Path, out: Path, coor: bool) -> Dict[str, str]:
    shared = root / "shared" / "inductor"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TORCHINDUCTOR_", "TRITON_", "PLAIN_", "TORCH_DISTRIBUTED_"))}
    env.update(TORCHINDUCTOR_CACHE_DIR=str(shared), TRITON_CACHE_DIR=str(shared / "triton"),
               TORCHINDUCTOR_FX_GRAPH_CACHE="1", TORCHINDUCTOR_AUTOGRAD_CACHE="1",
               PLAIN_PAIR_OUT=str(out), OMP_NUM_THREADS="1")
    if coor:
        env["TORCH_DISTRIBUTED_COMPILE_ON_ONE_RANK"] = "1"
    return env


def processes(body: str, name: str, nproc: int, env: Dict[str, str]) -> List[Any]:
    """The launch's commands, each with its environment."""
    script = str(HERE / "bodies" / f"{body}.py")
    replica = body in REPLICAS
    if name == "once":
        group = "none" if replica else "fake"
        one = {**env, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": str(nproc),
               "PLAIN_ONCE_GROUP": group}
        return [([sys.executable, script], one)]
    if not replica:
        return [([sys.executable, "-m", "torch.distributed.run", "--standalone",
                  "--nproc-per-node", str(nproc), script], env)]
    return [([sys.executable, script], {**env, "RANK": str(r), "LOCAL_RANK": str(r),
                                        "WORLD_SIZE": str(nproc), "PLAIN_ONCE_GROUP": "none"})
            for r in range(nproc)]


def launch(body: str, name: str, root: Path, nproc: int, coor: bool) -> Dict[str, Any]:
    """One launch: its processes started together; their results and wall seconds."""
    out = root / name
    out.mkdir(parents=True)
    env = base_env(root, out, coor)
    if name == "private":
        env["PLAIN_PAIR_PRIVATE"] = str(root / "private")
    start = time.monotonic()
    running = [subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True) for cmd, e in processes(body, name, nproc, env)]
    logs = [p.communicate()[0] for p in running]
    seconds = time.monotonic() - start
    (out / "log.txt").write_text("\n".join(logs))
    count = 1 if name == "once" else nproc
    return {"ranks": read_ranks(body, name, out, count, logs[-1]), "seconds": seconds}


def run_body(body: str, root: Path, nproc: int, coor: bool) -> None:
    results = {name: launch(body, name, root, nproc, coor) for name in LAUNCHES}
    private = results["private"]["ranks"]
    for name in LAUNCHES:
        for r, rank in enumerate(results[name]["ranks"]):
            versus = compared(rank["out"], private[r]["out"])
            print(f"| {body} | {name} | {r} | {rank['fx'][0]}/{rank['fx'][1]} | "
                  f"{rank['aot'][0]}/{rank['aot'][1]} | {outputs(rank)} | {versus} | "
                  f"{verdict(rank, versus)} | {results[name]['seconds']:.0f} |", flush=True)


def run_all(names: List[str], root: Path, nproc: int, coor: bool) -> None:
    print(f"torch {torch.__version__}, compile once then {nproc} loaders; "
          f"compile_on_one_rank {'on' if coor else 'off'} ({coor_name() or 'none'})\n")
    print("| body | launch | rank | fx hit/miss | aot hit/miss | outputs | vs private rank | "
          "verdict | launch s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in names:
        run_body(name, root / name, nproc, coor)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("bodies", nargs="*", metavar="BODY",
                        help=f"{', '.join(BODIES)} or all (default)")
    parser.add_argument("--nproc", type=int, default=2, help="loaders (ranks or replicas)")
    parser.add_argument("--no-coor", action="store_true",
                        help="run without TORCH_DISTRIBUTED_COMPILE_ON_ONE_RANK=1")
    parser.add_argument("--keep", type=Path, help="keep everything under this new dir")
    args = parser.parse_args(argv)
    names = list(BODIES) if args.bodies in ([], ["all"]) else args.bodies
    unknown = [n for n in names if n not in BODIES]
    if unknown:
        parser.error(f"unknown body {', '.join(unknown)}; known: {', '.join(BODIES)}")
    coor = bool(coor_name()) and not args.no_coor
    if args.keep:
        args.keep.mkdir(parents=True)
        run_all(names, args.keep, args.nproc, coor)
        return
    with tempfile.TemporaryDirectory(prefix="plain-once-") as tmp:
        run_all(names, Path(tmp), args.nproc, coor)


if __name__ == "__main__":
    main()
