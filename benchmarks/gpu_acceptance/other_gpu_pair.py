"""The plugin-free truth for --compile-cache-warm-on-other-gpu: a restart on another GPU
of the same machine, over one cache dir, beside a fresh compile on that GPU.

    python benchmarks/gpu_acceptance/other_gpu_pair.py resnet18_train bert_train

Per model, each step a fresh process (the same workload, seeded alike):
  cold      GPU 0 (CUDA_VISIBLE_DEVICES=0), writes the shared cache dir
  index     GPU 1 over that dir, both GPUs visible (CUDA_VISIBLE_DEVICES=0,1, cuda:1)
  pinned    GPU 1 over that dir, seen alone as cuda:0 (CUDA_VISIBLE_DEVICES=1)
  fresh     GPU 1, an empty cache dir (the reference of a run on GPU 1)
and prints each step's FX-graph and AOTAutograd hits and misses, its wall time, and how
far its outputs and gradients are from the fresh compile's (max abs difference).
Needs two GPUs; torch, torchvision and transformers as on the device tool.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKLOAD = r'''
import json, sys, time, torch
from torch._dynamo.utils import counters
name, out, device = sys.argv[1], sys.argv[2], sys.argv[3]
torch.manual_seed(0)
t0 = time.perf_counter()
if name == "resnet18_train":
    import torchvision
    model = torchvision.models.resnet18().to(device)
    inputs = (torch.randn(16, 3, 224, 224, device=device),)
    kwargs = {}
elif name == "bert_train":
    import transformers
    cfg = transformers.BertConfig(num_hidden_layers=4, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0)
    model = transformers.BertForMaskedLM(cfg).to(device)
    ids = torch.randint(0, cfg.vocab_size, (8, 128), device=device)
    inputs, kwargs = (), {"input_ids": ids, "labels": ids}
else:
    raise SystemExit(f"unknown model {name}")
compiled = torch.compile(model)
result = compiled(*inputs, **kwargs)
loss = result.loss if hasattr(result, "loss") else result.float().square().mean()
loss.backward()
torch.cuda.synchronize()
wall = time.perf_counter() - t0
tensors = {"loss": loss.detach().float().cpu()}
tensors.update({f"grad.{n}": p.grad.detach().float().cpu()
                for n, p in model.named_parameters() if p.grad is not None})
torch.save(tensors, out + ".pt")
c = counters
json.dump({"wall_s": wall, "device": str(torch.cuda.current_device()),
           "name": torch.cuda.get_device_name(),
           "fx_hit": c["inductor"]["fxgraph_cache_hit"], "fx_miss": c["inductor"]["fxgraph_cache_miss"],
           "aot_hit": c["aot_autograd"]["autograd_cache_hit"],
           "aot_miss": c["aot_autograd"]["autograd_cache_miss"]}, open(out + ".json", "w"))
'''


def step(work: Path, model: str, label: str, cache: Path, visible: str, device: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHINDUCTOR_")}
    env.update(TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"), TRITON_CACHE_DIR=str(cache / "triton"),
               CUDA_VISIBLE_DEVICES=visible)
    out = work / f"{model}-{label}"
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", WORKLOAD, model, str(out), device], env=env,
                          capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{model} {label} failed:\n{proc.stderr[-3000:]}")
    rec = json.loads(Path(str(out) + ".json").read_text())
    rec["process_s"] = time.perf_counter() - start
    return rec


def max_diff(a: Path, b: Path) -> float:
    import torch

    x, y = torch.load(str(a) + ".pt"), torch.load(str(b) + ".pt")
    return max(float((x[k] - y[k]).abs().max()) for k in x)


def main(models):
    work = Path(tempfile.mkdtemp(prefix="other-gpu-pair-"))
    print(f"{'model':<16} {'step':<7} {'visible':<8} {'fx hit/miss':>11} {'aot hit/miss':>12} "
          f"{'wall s':>7} {'process s':>9} {'max|d| vs fresh':>15}")
    for model in models:
        shared, empty = work / f"{model}-shared", work / f"{model}-empty"
        runs = [("cold", shared, "0", "cuda:0"), ("index", shared, "0,1", "cuda:1"),
                ("pinned", shared, "1", "cuda:0"), ("fresh", empty, "1", "cuda:0")]
        recs = {label: step(work, model, label, cache, vis, dev) for label, cache, vis, dev in runs}
        for label, _, vis, _ in runs:
            r = recs[label]
            d = max_diff(work / f"{model}-{label}", work / f"{model}-fresh")
            print(f"{model:<16} {label:<7} {vis:<8} {r['fx_hit']:>5}/{r['fx_miss']:<5} "
                  f"{r['aot_hit']:>6}/{r['aot_miss']:<5} {r['wall_s']:>7.1f} {r['process_s']:>9.1f} "
                  f"{d:>15.3g}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["resnet18_train", "bert_train"])
