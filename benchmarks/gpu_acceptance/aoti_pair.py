"""Does an AOTInductor package built on CUDA load in a fresh process? torch's API alone,
no plugin: one process builds a 3-layer MLP's package, a second one loads and runs it.

    python benchmarks/gpu_acceptance/aoti_pair.py

Prints each process's seconds, the loaded package's largest difference from eager, and
each process's exit status (a crash in the loader shows as a negative one: -11, SIGSEGV,
on an H100 with torch 2.11+cu130: docs/warm-start-paths.md).
"""
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKLOAD = r'''
import sys, time, torch
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).cuda().eval()
x = torch.randn(4, 64, device="cuda")
step, path = sys.argv[1], sys.argv[2]
t = time.time()
if step == "build":
    with torch.no_grad():
        ep = torch.export.export(m, (x,))
        torch._inductor.aoti_compile_and_package(ep, package_path=path)
    print("built in", round(time.time() - t, 1), "s", flush=True)
else:
    fn = torch._inductor.aoti_load_package(path)
    print("loaded in", round(time.time() - t, 1), "s", flush=True)
    with torch.no_grad():
        print("max abs difference from eager", (fn(x) - m(x)).abs().max().item(), flush=True)
'''


def main() -> int:
    path = str(Path(tempfile.mkdtemp(prefix="aoti-pair-")) / "mlp.pt2")
    rc = 0
    for step in ("build", "load"):
        t0 = time.time()
        proc = subprocess.run([sys.executable, "-c", WORKLOAD, step, path])
        print(f"{step}: exit {proc.returncode} after {time.time() - t0:.1f} s", flush=True)
        rc = rc or proc.returncode
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
