"""The plugin-free truth for multi-rank programs: a plain torchrun pair over one cache dir.

Issue 51's verdicts (ranks of one job over one TORCHINDUCTOR_CACHE_DIR) are held against
this: no plugin, only torchrun. Each body in bodies/ runs as 2 ranks (gloo, CPU) in three
launches of `python -m torch.distributed.run --standalone --nproc-per-node 2 BODY`:

  cold     over one fresh shared dir (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR under it):
           both ranks compile at once over it, as a node's ranks do
  warm     the same command again over the same dir
  private  each rank over its own fresh dir no other rank writes: what rank r's own
           compile gives (the reference a rank false hit is judged against)

    python benchmarks/fleet/plain_pair.py [BODY ...] [--nproc 2] [--keep DIR] [--keys]
        [--pythonhashseed N]

No BODY, or `all`, runs every body (about 4 minutes on 2 cores). Bodies:

  ddp              DDP(torch.compile(net)), a small MLP, two SGD steps
  rank_blind_pass  a post_grad_custom_post_pass folding the rank into a constant (relu's
                   output times rank + 1), its uuid() blind to the rank
  rank_keyed_pass  the same pass, its uuid() keyed by the rank
  tp_mlp           a 2-way tensor-parallel MLP (parallelize_module, Colwise/RowwiseParallel
                   over a cpu DeviceMesh), torch.compile'd, inference
  rank_input_pass  tests/test_ranks.py's rank-blind pass: the rank's scale, an input,
                   folded into a constant (the compile agrees with eager on its rank)
  ag_bucket        pytorch#188332's shape: two all-gathers that Inductor's
                   bucket_all_gathers_fx pass merges into one, writing the rank into
                   the graph after the FX key is computed

It prints one table row per body, launch and rank: FX graph cache hits/misses
(counters["inductor"]["fxgraph_cache_hit"/"fxgraph_cache_miss"]), AOTAutograd cache
hits/misses (counters["aot_autograd"]["autograd_cache_hit"/"autograd_cache_miss"]), the
outputs (the losses, or the output tensor's sum), whether the output equals the private
launch's same rank (bitwise; else the largest absolute difference), a verdict (FALSE HIT:
hit, and differs from the rank's own compile) and the launch's wall seconds.

--keys keeps the bytes torch hashes into each FX graph and AOTAutograd cache key (the
pickles torch's key picklers hash, under KEEP/BODY/LAUNCH/keys/) and prints, per rank,
whether the cold and warm launches hashed the same bytes and the first pickle opcode
where they differ (pickletools); --keep keeps everything (logs, keys, outputs).
--pythonhashseed N sets PYTHONHASHSEED=N in every launch, so that Python's str hashes
agree between processes: whether a key that holds a Python hash (the tp_mlp key holds the
DeviceMesh's memoized `_hash`) then agrees (on Python 3.11 it does not: hash(None), which
that hash takes in too, is the address of None, another in every process).
"""
from __future__ import annotations

import argparse
import io
import json
import os
import pickletools
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch

BODIES = ("ddp", "rank_blind_pass", "rank_keyed_pass", "tp_mlp", "rank_input_pass",
          "ag_bucket")
LAUNCHES = ("cold", "warm", "private")
DEVICES = ("cpu", "cuda:index", "cuda:pinned")
HERE = Path(__file__).resolve().parent


def launch(body: str, name: str, root: Path, nproc: int, keys: bool,
           seed: Optional[str]) -> Dict[str, Any]:
    """One torchrun launch of BODY; returns its ranks' results and wall seconds."""
    out = root / name
    out.mkdir(parents=True)
    shared = root / "shared" / "inductor"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TORCHINDUCTOR_", "TRITON_", "PLAIN_PAIR_"))
           or k == "PLAIN_PAIR_DEVICE"}
    env.update(TORCHINDUCTOR_CACHE_DIR=str(shared), TRITON_CACHE_DIR=str(shared / "triton"),
               TORCHINDUCTOR_FX_GRAPH_CACHE="1", TORCHINDUCTOR_AUTOGRAD_CACHE="1",
               PLAIN_PAIR_OUT=str(out), PLAIN_PAIR_KEYS="1" if keys else "0",
               OMP_NUM_THREADS="1")
    if seed is not None:
        env["PYTHONHASHSEED"] = seed
    if name == "private":
        env["PLAIN_PAIR_PRIVATE"] = str(root / "private")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", str(nproc), str(HERE / "bodies" / f"{body}.py")]
    start = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - start
    (out / "log.txt").write_text(proc.stdout + proc.stderr)
    ranks = read_ranks(body, name, out, nproc, f"(rc {proc.returncode})\n{proc.stderr}")
    return {"ranks": ranks, "seconds": seconds, "cmd": cmd}


def read_ranks(body: str, name: str, out: Path, nproc: int, log: str) -> List[Dict[str, Any]]:
    """What each rank of a launch wrote (its counters, its output); one that wrote
    nothing ends the script with the launch's log."""
    ranks = []
    for r in range(nproc):
        path = out / f"rank{r}.json"
        if not path.exists():
            sys.exit(f"{body} {name}: rank {r} wrote nothing {log[-3000:]}")
        result = json.loads(path.read_text())
        result["out"] = torch.load(out / f"rank{r}.pt")
        ranks.append(result)
    return ranks


def compared(out: torch.Tensor, ref: torch.Tensor) -> str:
    if out.shape != ref.shape:
        return f"shape {tuple(out.shape)} vs {tuple(ref.shape)}"
    if torch.equal(out, ref):
        return "equal"
    return f"max abs d {(out - ref).abs().max().item():.3g}"


def outputs(rank: Dict[str, Any]) -> str:
    if rank["losses"] is not None:
        return "losses " + ", ".join(f"{x:.6f}" for x in rank["losses"])
    return f"sum {rank['checksum']:.6f}"


def verdict(rank: Dict[str, Any], versus: str) -> str:
    hit = rank["fx"][0] > 0 or rank["aot"][0] > 0
    if versus == "equal":
        return "hit, equal" if hit else "miss, equal"
    return "FALSE HIT" if hit else "miss, DIFFERS"


def first_difference(a: bytes, b: bytes) -> str:
    """The first pickletools line where two pickles differ, with the line before it."""
    def lines(data: bytes) -> List[str]:
        text = io.StringIO()
        pickletools.dis(data, out=text, annotate=0)
        return [line.split(":", 1)[1] if ":" in line else line
                for line in text.getvalue().splitlines()]

    la, lb = lines(a), lines(b)
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            x, y = (" ".join(z.split()[1:])[:70] for z in (x, y))  # less the opcode byte
            return f"opcode {i}: {x!r} vs {y!r}"
    return f"one is a prefix of the other ({len(la)} vs {len(lb)} opcodes)"


def key_files(root: Path, name: str, r: int, kind: str) -> List[Path]:
    found = (root / name / "keys").glob(f"rank{r}-{kind}*.pkl")
    return sorted(found, key=lambda p: int(p.name.split("-")[1][len(kind):]))


def print_keys(body: str, root: Path, nproc: int) -> None:
    for r in range(nproc):
        for kind in ("fx", "aot"):
            cold, warm = key_files(root, "cold", r, kind), key_files(root, "warm", r, kind)
            for i, (a, b) in enumerate(zip(cold, warm)):
                da, db = a.read_bytes(), b.read_bytes()
                same = "same bytes" if da == db else first_difference(da, db)
                print(f"- {body} rank {r} {kind.upper()} key {i}: cold "
                      f"{a.stem.split('-')[2][:12]} ({len(da)} B), warm "
                      f"{b.stem.split('-')[2][:12]} ({len(db)} B): {same}")


def run_body(body: str, root: Path, nproc: int, keys: bool, seed: Optional[str]) -> None:
    results = {name: launch(body, name, root, nproc, keys, seed) for name in LAUNCHES}
    private = results["private"]["ranks"]
    for name in LAUNCHES:
        launch_result = results[name]
        for r, rank in enumerate(launch_result["ranks"]):
            versus = compared(rank["out"], private[r]["out"])
            aot = "{}/{}".format(*rank["aot"]) + (f" ({rank['aot'][2]} bypass)"
                                                  if rank["aot"][2] else "")
            print(f"| {body} | {name} | {r} | {rank['fx'][0]}/{rank['fx'][1]} | {aot} | "
                  f"{outputs(rank)} | {versus} | {verdict(rank, versus)} | "
                  f"{launch_result['seconds']:.0f} |", flush=True)
    if keys:
        print_keys(body, root, nproc)


def run_all(names: List[str], root: Path, nproc: int, keys: bool,
            seed: Optional[str]) -> None:
    backend = "gloo" if os.environ["PLAIN_PAIR_DEVICE"] == "cpu" else "nccl"
    print(f"torch {torch.__version__}, {nproc} ranks, {backend} "
          f"({os.environ['PLAIN_PAIR_DEVICE']}); launch command: "
          f"python -m torch.distributed.run --standalone --nproc-per-node {nproc} BODY"
          + (f"; PYTHONHASHSEED={seed}" if seed is not None else "") + "\n")
    print("| body | launch | rank | fx hit/miss | aot hit/miss | outputs | vs private rank | "
          "verdict | launch s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in names:
        run_body(name, root / name, nproc, keys, seed)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("bodies", nargs="*", metavar="BODY",
                        help=f"{', '.join(BODIES)} or all (default)")
    parser.add_argument("--nproc", type=int, default=2, help="ranks per launch")
    parser.add_argument("--keep", type=Path, help="keep everything under this new dir")
    parser.add_argument("--keys", action="store_true",
                        help="keep and compare the bytes of each FX key (the docstring)")
    parser.add_argument("--pythonhashseed", metavar="N",
                        help="PYTHONHASHSEED for every launch (the docstring)")
    parser.add_argument("--device", choices=DEVICES, default="cpu",
                        help="cpu (gloo); cuda:index (NCCL, rank r on cuda:r) or "
                        "cuda:pinned (NCCL, each rank sees only its GPU, as cuda:0)")
    args = parser.parse_args(argv)
    os.environ["PLAIN_PAIR_DEVICE"] = args.device
    names = list(BODIES) if args.bodies in ([], ["all"]) else args.bodies
    unknown = [n for n in names if n not in BODIES]
    if unknown:
        parser.error(f"unknown body {', '.join(unknown)}; known: {', '.join(BODIES)}")
    if args.keep:
        args.keep.mkdir(parents=True)
        run_all(names, args.keep, args.nproc, args.keys, args.pythonhashseed)
        return
    with tempfile.TemporaryDirectory(prefix="plain-pair-") as tmp:
        run_all(names, Path(tmp), args.nproc, args.keys, args.pythonhashseed)


if __name__ == "__main__":
    main()
