"""What the preloaded interpreter's imports cost on this machine, and whether its Python
can use a bytecode cache for torch (run it twice: the second run reads what the first
wrote, if anything could be written). Prints one JSON line.

    python benchmarks/speed/import_probe.py
"""
import json
import os
import sys
import time

t0 = time.perf_counter()
import torch  # noqa: E402

t = {"torch": time.perf_counter() - t0}
import torch._dynamo  # noqa: E402,F401
import torch._inductor.compile_fx  # noqa: E402,F401

t["stack"] = time.perf_counter() - t0
import torchvision  # noqa: E402,F401

t["torchvision"] = time.perf_counter() - t0
here = os.path.dirname(torch.__file__)
cache = os.path.join(here, "__pycache__")
tag = sys.implementation.cache_tag
pyc = [f for f in (os.listdir(cache) if os.path.isdir(cache) else []) if tag in f]
print(json.dumps({**{k: round(v, 2) for k, v in t.items()}, "torch_dir": here,
                  "dont_write_bytecode": sys.flags.dont_write_bytecode,
                  "pycache_prefix": sys.pycache_prefix, "pyc_in_torch_dir": len(pyc),
                  "torch_dir_writable": os.access(here, os.W_OK),
                  "PYTHON_env": {k: v for k, v in os.environ.items() if k.startswith("PYTHON")},
                  "version": torch.__version__}), flush=True)
os._exit(0)
