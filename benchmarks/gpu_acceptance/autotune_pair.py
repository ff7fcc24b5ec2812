"""A plugin-free cold/warm pair under max-autotune, spying on the functions that do the
work, to hold the plugin's autotune and kernels verdicts against.

    python benchmarks/gpu_acceptance/autotune_pair.py mlp max-autotune-no-cudagraphs
    python benchmarks/gpu_acceptance/autotune_pair.py resnet18 max-autotune
    python benchmarks/gpu_acceptance/autotune_pair.py swin_t default

Two fresh processes over one private cache dir (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR
under it), no pytest, no plugin. Each wraps, for its one compiled step: Triton compiles
(triton.knobs.compilation.listener, cache_hit False), template selection
(AlgorithmSelectorCache's benchmark), config benchmarks
(CachingAutotuner.benchmark_all_configs) and coordinate-descent tuning
(CoordescTuner.autotune), and prints their counts and the seconds they took beside the
counters torch keeps (which an FX-graph cache hit replays) and the compiled call's
seconds; torch's reads of stored results (AutotuneCache.read_best) are counted by what
they returned. `--delete-best-config` removes the autotune
results between the processes.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r'''
import functools, json, sys, time
import torch

name, mode = sys.argv[1], sys.argv[2]
seen = {"triton_compiles": 0, "triton_disk_hits": 0, "select": 0, "configs": 0, "coordesc": 0,
        "tuning_s": 0.0, "reads_loaded": 0, "reads_declined": 0}
spied = []


def spy(module, cls, method, kind):
    try:
        mod = __import__(module, fromlist=["x"])
        klass = getattr(mod, cls)
        original = klass.__dict__[method]
    except Exception:
        return
    @functools.wraps(original)
    def wrapper(*a, **kw):
        if kind == "reads":
            got = original(*a, **kw)
            seen["reads_loaded" if got is not None else "reads_declined"] += 1
            return got
        seen[kind] += 1
        began = time.perf_counter()
        try:
            return original(*a, **kw)
        finally:
            seen["tuning_s"] += time.perf_counter() - began
    setattr(klass, method, wrapper)
    spied.append(f"{cls}.{method}")


for m in ("autotune", "benchmark"):  # the first that exists: autotune calls benchmark
    before = len(spied)
    spy("torch._inductor.select_algorithm", "AlgorithmSelectorCache", m, "select")
    if len(spied) > before:
        break
spy("torch._inductor.runtime.triton_heuristics", "CachingAutotuner", "benchmark_all_configs",
    "configs")
spy("torch._inductor.runtime.coordinate_descent_tuner", "CoordescTuner", "autotune", "coordesc")
spy("torch._inductor.runtime.autotune_cache", "AutotuneCache", "read_best", "reads")
try:
    from triton import knobs

    def listener(*, cache_hit, **kw):
        seen["triton_disk_hits" if cache_hit else "triton_compiles"] += 1

    knobs.compilation.listener = listener
    spied.append("triton listener")
except Exception:
    pass

torch.manual_seed(0)
if name == "mlp":
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 1024))
    x = torch.randn(256, 1024)
elif name == "swin_t":
    import torchvision
    model = torchvision.models.swin_t()
    x = torch.randn(8, 3, 224, 224)
else:
    import torchvision
    model = torchvision.models.resnet18()
    x = torch.randn(8, 3, 224, 224)
model, x = model.cuda().eval(), x.cuda()
from torch._dynamo.utils import counters
t0 = time.perf_counter()
with torch.no_grad():
    torch.compile(model, **({} if mode == "default" else {"mode": mode}))(x)
torch.cuda.synchronize()
seen["wall_s"] = round(time.perf_counter() - t0, 1)
seen["tuning_s"] = round(seen["tuning_s"], 3)
seen["counters"] = {k: v for k, v in counters["inductor"].items()
                    if k in ("select_algorithm_autotune", "coordesc_tuning_bench",
                             "fxgraph_cache_hit", "fxgraph_cache_miss")}
seen["spied"] = spied
print("PAIR " + json.dumps(seen), flush=True)
'''


def run(name: str, mode: str, root: Path, phase: str) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
           "TRITON_CACHE_DIR": str(root / "triton")}
    out = subprocess.run([sys.executable, "-c", CHILD, name, mode], env=env, text=True,
                         capture_output=True)
    line = next((x for x in out.stdout.splitlines() if x.startswith("PAIR ")), None)
    if line is None:
        print(out.stdout[-2000:], out.stderr[-4000:])
        raise SystemExit(f"{phase} process failed")
    return json.loads(line[5:])


def main() -> None:
    name, mode = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        t = time.time()
        cold = run(name, mode, root, "cold")
        if "--delete-best-config" in sys.argv:
            for f in root.rglob("*.best_config"):
                f.unlink()
        warm = run(name, mode, root, "warm")
        print(json.dumps({"model": name, "mode": mode, "cold": cold, "warm": warm,
                          "pair_s": round(time.time() - t, 1)}))


if __name__ == "__main__":
    main()
