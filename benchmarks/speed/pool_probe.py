"""Is Inductor's compile-worker pool on a cold compile's critical path? One plain process
(as cold_warm.py's resnet18 training, a fresh cache dir): when torch starts the pool, when
it is ready, and how many Triton kernels compiled in this process (pool not ready yet)
against in the pool.

    python benchmarks/speed/pool_probe.py [early]     (GPU machine; prints one JSON line)

`early`: the pool is started right after the imports, before the model is built, where a
phase could start it in parallel with its fixture (this is a measurement, not something
the plugin does to a phase).
"""
import json
import sys
import tempfile
import time

t0 = time.time()
import os  # noqa: E402

d = tempfile.mkdtemp(prefix="pool-probe-")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = d + "/ind"
os.environ["TRITON_CACHE_DIR"] = d + "/tri"
import torch  # noqa: E402

t_torch = time.time() - t0
import torchvision  # noqa: E402

t_tv = time.time() - t0
from torch._inductor import async_compile as ac  # noqa: E402

t_ac = time.time() - t0
ev = {"torch": t_torch, "torchvision": t_tv, "async_compile": t_ac}
kernels = []
orig_warm, orig_triton = ac.maybe_warm_pool, ac.AsyncCompile.triton


def warm():
    ev.setdefault("warm_called", time.time() - t0)
    orig_warm()
    fut = ac.AsyncCompile._ready_future
    if fut is not None:
        fut.add_done_callback(lambda f: ev.setdefault("pool_ready", time.time() - t0))
    ev.setdefault("warm_returned", time.time() - t0)


def triton(self, kernel_name, source_code, device_str="cuda"):
    kernels.append((round(time.time() - t0, 2), bool(ac.AsyncCompile.use_process_pool())))
    return orig_triton(self, kernel_name, source_code, device_str)


ac.maybe_warm_pool = warm
ac.AsyncCompile.triton = triton
if "early" in sys.argv[1:]:
    warm()
torch.manual_seed(0)
m = torchvision.models.resnet18(num_classes=10).cuda()
x = torch.randn(16, 3, 224, 224, device="cuda")
torch.cuda.synchronize()
ev["model_on_gpu"] = time.time() - t0
f = torch.compile(m)
out = f(x)
torch.cuda.synchronize()
ev["forward"] = time.time() - t0
out.sum().backward()
torch.cuda.synchronize()
ev["backward"] = time.time() - t0
inproc = [t for t, par in kernels if not par]
ev.update(kernels=len(kernels), in_process=len(inproc),
          first_kernel=kernels[0][0] if kernels else None,
          last_in_process=inproc[-1] if inproc else None,
          mode="early" if "early" in sys.argv[1:] else "torch's")
print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in ev.items()}),
      flush=True)
os._exit(0)
