"""Does an AOTInductor package built on CUDA load in a fresh process (torch's API
alone, no plugin)? `build` then `load`, each its own process; env decides the dirs."""
import sys
import time

import torch

torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).cuda().eval()
x = torch.randn(4, 64, device="cuda")
path = sys.argv[2]
t = time.time()
if sys.argv[1] == "build":
    with torch.no_grad():
        ep = torch.export.export(m, (x,))
        torch._inductor.aoti_compile_and_package(ep, package_path=path)
    print("built", round(time.time() - t, 1), flush=True)
else:
    fn = torch._inductor.aoti_load_package(path)
    print("loaded", round(time.time() - t, 1), flush=True)
    with torch.no_grad():
        print("max diff", (fn(x) - m(x)).abs().max().item(), flush=True)
