"""The bodies of test_amp_training.py without the plugin: a cold then a warm process
over one cache dir, to stand beside the plugin's verdict.

    python benchmarks/gpu_acceptance/amp_plain_pair.py [BODY ...]

BODY: fp16_gradscaler_sgd, bf16_adamw, fp32_sgd_momentum (default: all three). Per
process it prints the compile+run time, whether Inductor's FX graph cache and the
AOTAutograd cache hit (torch's own counters, read after the run: the backward compiles
at the first .backward()), and whether the warm outputs (each step's recorded values
and the trained weights) equal the cold ones bitwise. Runs on CUDA where there is a
device, else on CPU (PYTEST_COMPILECACHE_AMP_SMALL=1 shrinks the work).
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _bodies():
    spec = importlib.util.spec_from_file_location("amp_training", HERE / "test_amp_training.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.BODIES


def child(name, out_path):
    """One process: the body, timed; its counters and outputs."""
    import torch
    from torch._dynamo.utils import counters

    device = "cuda" if torch.cuda.is_available() else "cpu"
    outputs = {}

    def record(key, value):
        outputs[f"record:{key}"] = torch.as_tensor(value).detach().to("cpu", copy=True)

    start = time.perf_counter()
    model = _bodies()[name](device, record)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    for key, value in model.state_dict().items():
        outputs[f"state:{key}"] = value.detach().to("cpu", copy=True)
    torch.save(outputs, out_path)
    inductor, aot = counters["inductor"], counters["aot_autograd"]
    print(json.dumps({"device": device, "seconds": round(seconds, 2),
                      "fxgraph_hit": inductor["fxgraph_cache_hit"],
                      "fxgraph_miss": inductor["fxgraph_cache_miss"],
                      "aot_hit": aot["autograd_cache_hit"],
                      "aot_miss": aot["autograd_cache_miss"]}))


def pair(name):
    """Cold then warm in fresh processes over one private cache dir."""
    import torch

    root = Path(tempfile.mkdtemp(prefix=f"amp-pair-{name}-"))
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(root / "inductor"),
               TRITON_CACHE_DIR=str(root / "triton"))
    rows = {}
    for phase in ("cold", "warm"):
        out = root / f"{phase}.pt"
        done = subprocess.run([sys.executable, __file__, "--child", name, str(out)], env=env,
                              capture_output=True, text=True)
        if done.returncode:
            print(f"{name} {phase}: exit {done.returncode}\n{done.stderr[-3000:]}")
            return False
        rows[phase] = json.loads(done.stdout.strip().splitlines()[-1])
        rows[phase]["outputs"] = torch.load(out, weights_only=True)
    cold, warm = rows["cold"].pop("outputs"), rows["warm"].pop("outputs")
    differ = sorted(k for k in cold if k not in warm or not torch.equal(cold[k], warm[k]))
    for phase in ("cold", "warm"):
        r = rows[phase]
        print(f"{name:20} {phase}: {r['device']} compile+run {r['seconds']:7.2f} s, fx graph "
              f"cache {'hit' if r['fxgraph_hit'] and not r['fxgraph_miss'] else 'miss'} "
              f"(hit {r['fxgraph_hit']}, miss {r['fxgraph_miss']}), aot autograd cache "
              f"hit {r['aot_hit']}, miss {r['aot_miss']}")
    print(f"{name:20} warm vs cold: " + ("equal bitwise" if not differ else
          f"{len(differ)} of {len(cold)} differ: {', '.join(differ[:6])}")
          + f" ({len(cold)} tensors; cache dir {root})")
    return not differ


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bodies", nargs="*", help="which bodies (default: all)")
    parser.add_argument("--child", nargs=2, metavar=("BODY", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return 0
    names = args.bodies or list(_bodies())
    unknown = sorted(set(names) - set(_bodies()))
    if unknown:
        parser.error(f"unknown bodies {unknown}; choose from {sorted(_bodies())}")
    return 0 if all([pair(name) for name in names]) else 1


if __name__ == "__main__":
    sys.exit(main())
