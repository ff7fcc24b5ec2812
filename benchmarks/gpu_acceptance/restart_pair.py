"""A plugin-free cold/warm restart of one model, to tell torch's behaviour from the harness's.

    python benchmarks/gpu_acceptance/restart_pair.py gpt2 [--compile-threads N]

Runs the same workload in two fresh processes over one cache dir (as the plugin does,
but without any probe, listener or pytest), then lists the Triton cache dirs the warm
process added and, for each, the cold dir with the same kernel name: whether the
sources are equal and which metadata differs.
"""
import argparse
import difflib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKLOAD = r'''
import os, sys, time, torch
torch.manual_seed(0)
if os.environ.get("RESTART_PAIR_KEYS"):
    # print the parts of Triton's cache key for kernels matching the pattern
    import triton.compiler.compiler as tc
    original = tc.get_cache_key
    def get_cache_key(src, backend, options, env_vars):
        name = getattr(getattr(src, "fn", None), "__name__", "")
        if os.environ["RESTART_PAIR_KEYS"] in name:
            parts = {"src": src.hash(), "fn.cache_key": src.fn.cache_key, "backend": backend.hash(),
                     "options": options.hash(), "env": str(sorted(env_vars.items())),
                     "signature": src.signature, "constants": src.constants,
                     "attrs": src.attrs}
            print("KEY", name[-8:], {k: str(v)[:300] for k, v in parts.items()}, flush=True)
        return original(src, backend, options, env_vars)
    tc.get_cache_key = get_cache_key
name = sys.argv[1]
if name == "gpt2":
    import transformers
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=6)).cuda().eval()
    args, kwargs = (torch.randint(0, 50257, (4, 128), device="cuda"),), {"use_cache": False}
elif name == "vit_tiny":
    import timm
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False).cuda().eval()
    args, kwargs = (torch.randn(8, 3, 224, 224, device="cuda"),), {}
start = time.perf_counter()
with torch.no_grad():
    out = torch.compile(model)(*args, **kwargs)
torch.cuda.synchronize()
print("wall_s", round(time.perf_counter() - start, 2))
'''


def triton_dirs(root):
    found = {}
    for d in (root / "triton").iterdir():
        for meta in d.glob("*.json"):
            if not meta.name.startswith("__grp__"):
                found[d.name] = json.loads(meta.read_text())
    return found


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model", choices=["gpt2", "vit_tiny"])
    parser.add_argument("--compile-threads", type=int)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="restart-pair-"))
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(root / "inductor"),
               TRITON_CACHE_DIR=str(root / "triton"), TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE="0")
    if args.compile_threads:
        env["TORCHINDUCTOR_COMPILE_THREADS"] = str(args.compile_threads)
    script = root / "workload.py"
    script.write_text(WORKLOAD)
    seen = {}
    for phase in ("cold", "warm"):
        before = set(seen)
        start = time.perf_counter()
        done = subprocess.run([sys.executable, str(script), args.model], env=env,
                              capture_output=True, text=True)
        print(phase, "rc", done.returncode, done.stdout.strip()[-6000:],
              "process s", round(time.perf_counter() - start, 1))
        if done.returncode:
            print(done.stderr[-3000:])
            return 1
        seen = triton_dirs(root)
        print(phase, "added", len(set(seen) - before), "triton dirs")
    cold_by_name = {}
    for d, meta in seen.items():
        cold_by_name.setdefault(meta.get("name"), []).append(d)
    for d in sorted(set(seen) - before):
        meta = seen[d]
        name = meta.get("name")
        print("\nwarm compiled", name, d[:12])
        files = {f.suffix: f for f in (root / "triton" / d).iterdir()}
        for py in (root / "inductor").rglob("*.py"):
            text = py.read_text(errors="replace")
            if f"def {name}(" in text:
                best = py.with_suffix(".best_config")
                print("  kernel module", py.name, "best_config:",
                      best.read_text() if best.exists() else None)
                print("  " + "\n  ".join(line for line in text.splitlines()
                                           if "triton_meta=" in line or "inductor_meta=" in line)[:1500])
        for other in cold_by_name.get(name, []):
            if other == d:
                continue
            ofiles = {f.suffix: f for f in (root / "triton" / other).iterdir()}
            omet = seen[other]
            diff = {k: (omet.get(k), meta.get(k)) for k in set(meta) | set(omet)
                    if meta.get(k) != omet.get(k) and k != "hash"}
            differing = [s for s in sorted(set(files) & set(ofiles)) if s != ".json"
                         and files[s].read_bytes() != ofiles[s].read_bytes()]
            print("  vs", other[:12], "files differing:", differing, "metadata diff:",
                  json.dumps(diff, default=str)[:800])
            for suffix in differing[:2]:
                a, b = ofiles[suffix], files[suffix]
                try:
                    print("".join(list(difflib.unified_diff(a.read_text().splitlines(True),
                                                            b.read_text().splitlines(True)))[:40]))
                except UnicodeDecodeError:
                    pass
    print("root", root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
