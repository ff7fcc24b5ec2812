"""For a kept cache root: which Triton kernels did the warm run compile, and how do
they differ from what cold compiled under the same kernel name?"""
import json
import sys
from pathlib import Path

root = Path(sys.argv[1])
warm = json.loads((root / "phases" / "warm.json").read_text())
cold = json.loads((root / "phases" / "cold.json").read_text())
print("warm kernels:", warm["cache"]["kernels"])
print("cold kernels:", {k: v for k, v in cold["cache"]["kernels"].items() if k != "autotune_cache_states"},
      "autotune states:", cold["cache"]["kernels"]["autotune_cache_states"])
dirs = sorted((root / "triton").iterdir(), key=lambda p: p.stat().st_mtime)
by_name = {}
for d in dirs:
    for j in d.glob("*.json"):
        if j.name.startswith("__grp__"):
            continue
        meta = json.loads(j.read_text())
        by_name.setdefault(meta.get("name"), []).append((d, meta))
for name, entries in by_name.items():
    if len(entries) > 1:
        print("\nkernel", name, "has", len(entries), "triton dirs")
        base = entries[0][1]
        for d, meta in entries[1:]:
            diff = {k: (base.get(k), meta.get(k)) for k in set(base) | set(meta)
                    if base.get(k) != meta.get(k) and k not in ("hash",)}
            print("  ", d.name[:12], "differs in", json.dumps(diff, default=str)[:1500])
        srcs = [(d / f"{name}.source") for d, _ in entries]
        if all(s.exists() for s in srcs):
            print("   sources equal:", len({s.read_text() for s in srcs}) == 1)
