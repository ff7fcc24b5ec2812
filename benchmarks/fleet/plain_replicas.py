"""The plugin-free truth for replicas: one cold process over a cache dir, then N at once.

Issue 51 point 4's verdicts (N single-process replicas warming from one cache built
once, as a fleet of inference servers does, one per GPU) are held against this: no
plugin, only processes of this script over plain TORCHINDUCTOR_CACHE_DIRs:

  cold     replica 0 alone over one fresh shared dir (TRITON_CACHE_DIR under it)
  warm     N replicas started at the same time over that dir
  private  each replica over a fresh dir of its own: what its own compile gives (the
           reference its warm outputs are held to)

    python benchmarks/fleet/plain_replicas.py [BODY ...] [--replicas 2] [--device cpu|cuda]
        [--keep DIR]

No BODY, or `all`, runs the CPU bodies. Bodies:

  mlp                 a small MLP, torch.compile'd, inference
  convnet             a small convnet, torch.compile'd, inference
  replica_blind_pass  a post_grad_custom_post_pass folding the replica's scale (replica
                      + 1, an input) into a constant, its uuid() blind to the replica
  resnet18            torchvision's resnet18 (random weights), inference (needs
                      torchvision; slow on CPU)

Each replica is told which one it is in PYTEST_COMPILECACHE_REPLICA (0 .. N-1), the
variable the plugin's replicas get, as a fleet's launcher tells each server. With
--device cuda replica r sees only GPU r, as cuda:0 (CUDA_VISIBLE_DEVICES=r; the cold
replica GPU 0): one server per GPU.

It prints one row per body, launch and replica: FX graph cache hits/misses
(counters["inductor"]["fxgraph_cache_hit"/"fxgraph_cache_miss"]), AOTAutograd cache
hits/misses, the output's sum, the output against the private launch's same replica
(bitwise, else the largest absolute difference), a verdict (FALSE HIT: it hit, and
differs from its own compile) and the launch's wall seconds; then, per body, the shared
dir's entry files after cold and after warm, and whether each still holds the bytes its
name (the sha256 of its content) says: a torn or partial entry would not.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

BODIES = ("mlp", "convnet", "replica_blind_pass", "resnet18")
CPU_BODIES = ("mlp", "convnet", "replica_blind_pass")
REPLICA_ENV = "PYTEST_COMPILECACHE_REPLICA"


def body(name: str, device: str) -> Any:
    """Run BODY once in this process; returns its output tensor."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    if name == "replica_blind_pass":
        return blind_pass(device)
    if name == "mlp":
        net: Any = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
        x = torch.randn(16, 32)
    elif name == "convnet":
        net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                            nn.Flatten(), nn.Linear(8, 4))
        x = torch.randn(2, 3, 16, 16)
    else:
        import torchvision

        net, x = torchvision.models.resnet18(), torch.randn(2, 3, 64, 64)
    net, x = net.to(device).eval(), x.to(device)
    with torch.no_grad():
        return torch.compile(net)(x)


def blind_pass(device: str) -> Any:
    """relu(x @ w) * s, s the replica's scale (an input), folded into a constant by a
    post-grad pass whose uuid() ignores the replica (tests/test_ranks.py's body)."""
    import torch
    from torch._inductor.custom_graph_pass import CustomGraphPass

    replica = int(os.environ[REPLICA_ENV])

    class FoldReplica(CustomGraphPass):
        def __call__(self, graph: Any) -> None:
            for node in list(graph.nodes):
                mul = node.op == "call_function" and node.target is torch.ops.aten.mul.Tensor
                first = node.args[0] if mul else None
                relu = isinstance(first, torch.fx.Node) and (
                    first.target is torch.ops.aten.relu.default)
                if relu:
                    node.args = (first, float(replica + 1))

        def uuid(self) -> str:
            return "fold-replica-v1"

    torch._inductor.config.post_grad_custom_post_pass = FoldReplica()
    x, w = torch.randn(4, 8, device=device), torch.randn(8, 8, device=device)
    s = torch.tensor(float(replica + 1), device=device)
    with torch.no_grad():
        return torch.compile(lambda a, b, c: torch.relu(a @ b) * c + 1)(x, w, s)


def child(name: str, device: str, out: Path) -> None:
    """One replica: the body, then its counters and output under OUT."""
    import torch
    from torch._dynamo.utils import counters

    result = body(name, device)
    aot = counters["aot_autograd"]
    replica = os.environ[REPLICA_ENV]
    torch.save(result.detach().cpu(), out / f"replica{replica}.pt")
    (out / f"replica{replica}.json").write_text(json.dumps({
        "fx": [counters["inductor"]["fxgraph_cache_hit"],
               counters["inductor"]["fxgraph_cache_miss"]],
        "aot": [aot["autograd_cache_hit"], aot["autograd_cache_miss"]],
        "checksum": result.double().sum().item()}))


def launch(name: str, launch_name: str, root: Path, replicas: List[int],
           device: str) -> Dict[str, Any]:
    """The replicas of one launch, started at the same time; their results."""
    out = root / launch_name
    out.mkdir(parents=True)
    procs = []
    start = time.monotonic()
    for r in replicas:
        cache = root / ("shared" if launch_name != "private" else f"private{r}") / "inductor"
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("TORCHINDUCTOR_", "TRITON_"))}
        env.update(TORCHINDUCTOR_CACHE_DIR=str(cache), TRITON_CACHE_DIR=str(cache / "triton"),
                   TORCHINDUCTOR_FX_GRAPH_CACHE="1", TORCHINDUCTOR_AUTOGRAD_CACHE="1",
                   OMP_NUM_THREADS="1", **{REPLICA_ENV: str(r)})
        if device == "cuda":
            env["CUDA_VISIBLE_DEVICES"] = str(r)
        cmd = [sys.executable, __file__, "--child", name, "--device", device,
               "--out", str(out)]
        log = open(out / f"replica{r}.log", "w")
        procs.append((r, subprocess.Popen(cmd, env=env, stdout=log, stderr=log), log))
    for r, proc, log in procs:
        rc = proc.wait()
        log.close()
        if rc != 0:
            sys.exit(f"{name} {launch_name}: replica {r} failed (rc {rc}); "
                     f"{(out / f'replica{r}.log').read_text()[-3000:]}")
    seconds = time.monotonic() - start
    import torch

    return {r: {**json.loads((out / f"replica{r}.json").read_text()),
                "out": torch.load(out / f"replica{r}.pt"), "seconds": seconds}
            for r in replicas}


def entries(root: Path) -> Dict[str, bool]:
    """The shared dir's entry files, each: whether its bytes hash to its name (torch
    names an entry file by its content's hash, codecache.sha256_hash)."""
    from torch._inductor.codecache import sha256_hash

    found = {}
    for layer in ("fxgraph", "aotautograd"):
        for path in (root / "shared" / "inductor" / layer).rglob("*"):
            if path.is_file() and not path.name.startswith("."):
                found[str(path.relative_to(root))] = path.name == sha256_hash(
                    path.read_bytes())
    return found


def compared(out: Any, ref: Any) -> str:
    import torch

    if out.shape != ref.shape:
        return f"shape {tuple(out.shape)} vs {tuple(ref.shape)}"
    if torch.equal(out, ref):
        return "equal"
    return f"max abs d {(out - ref).abs().max().item():.3g}"


def verdict(hit: bool, versus: str) -> str:
    if versus == "equal":
        return "hit, equal" if hit else "miss, equal"
    return "FALSE HIT" if hit else "miss, DIFFERS"


def run(name: str, n: int, device: str, root: Path) -> None:
    cold = launch(name, "cold", root, [0], device)
    after_cold = entries(root)
    warm = launch(name, "warm", root, list(range(n)), device)
    after_warm = entries(root)
    private = launch(name, "private", root, list(range(n)), device)
    for launch_name, rows in (("cold", cold), ("warm", warm), ("private", private)):
        for r, row in rows.items():
            versus = compared(row["out"], private[r]["out"])
            said = verdict(row["fx"][0] > 0 or row["aot"][0] > 0, versus)
            print(f"| {name} | {launch_name} | {r} | {row['fx'][0]}/{row['fx'][1]} | "
                  f"{row['aot'][0]}/{row['aot'][1]} | sum {row['checksum']:.6f} | {versus} | "
                  f"{said} | {row['seconds']:.0f} |", flush=True)
    gone = sorted(set(after_cold) - set(after_warm))
    bad = sorted(p for p, ok in after_warm.items() if not ok)
    print(f"- {name}: shared dir entry files {len(after_cold)} after cold, "
          f"{len(after_warm)} after warm; gone {len(gone)}, not their named bytes "
          f"{len(bad)}{': ' + ', '.join(gone + bad) if gone or bad else ''}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bodies", nargs="*", default=[])
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--keep", help="keep every launch's dirs, logs and outputs here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child, args.device, Path(args.out))
    names = list(CPU_BODIES) if not args.bodies or args.bodies == ["all"] else args.bodies
    unknown = [b for b in names if b not in BODIES]
    if unknown:
        sys.exit(f"unknown bod(ies) {', '.join(unknown)}: {', '.join(BODIES)}")
    import torch

    print(f"torch {torch.__version__}, {args.replicas} replicas, {args.device}")
    print("| body | launch | replica | fx hit/miss | aot hit/miss | outputs | "
          "vs private replica | verdict | launch s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in names:
        root = Path(args.keep) / name if args.keep else Path(tempfile.mkdtemp(
            prefix=f"plain-replicas-{name}-"))
        run(name, args.replicas, args.device, root)


if __name__ == "__main__":
    main()
