"""Keys-only benchmark: a full check session and a `--compile-cache-keys-only` session
over the same tests, one after the other in one run; prints the wall ratio and whether
every check's cold keys are the same, graph for graph.

    python benchmarks/keys_only/run.py [PYTEST ARGS]            # CPU: examples/
    bash benchmarks/device.sh run python benchmarks/keys_only/run.py gpu   # the GPU models

`gpu` stands for benchmarks/gpu_acceptance/test_gpu_models.py's resnet18 training, BERT
training and resnet152 under reduce-overhead. Each session has its own store and report
under $OUT (or /tmp/out): keys-full.json, keys-only.json and their logs.
"""
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "sharding"))
from checksession import session  # noqa: E402
from timings import main as timings  # noqa: E402
GPU = [str(ROOT / "benchmarks/gpu_acceptance/test_gpu_models.py"), "-k",
       "resnet18_training or bert_mlm_training or resnet152_reduce_overhead"]


def cold_keys(check):
    return {(g["layer"], g["compile_id"], g.get("backward", False)): g.get("key")
            for g in check.get("graphs") or [] if g.get("phase") == "cold"}


def main(args):
    out = pathlib.Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    if args[:1] == ["gpu"]:
        args = GPU + args[1:]
    elif not args:
        args = [str(ROOT / "examples")]
    full_s, full = session(ROOT, out, "keys-full", args, [f"--compile-cache-store={out / 'store-keys-full'}"])
    keys_s, keys = session(ROOT, out, "keys-only", args, [f"--compile-cache-store={out / 'store-keys-only'}",
                                                         "--compile-cache-keys-only"])
    same = True
    print(f"{'check':<60} {'graphs':>6}  keys       note")
    for nodeid, check in full.items():
        want, got = cold_keys(check), cold_keys(keys.get(nodeid, {}))
        equal = bool(want) and want == got
        same &= equal
        note = next((n for n in keys.get(nodeid, {}).get("notes", []) if "keys-only" in n), "")
        print(f"{nodeid[-60:]:<60} {len(want):>6}  {'same' if equal else 'DIFFER':<9}  {note}")
        if not equal:
            for k in sorted(set(want) | set(got), key=str):
                if want.get(k) != got.get(k):
                    print(f"    {k}: full {want.get(k)} keys-only {got.get(k)}")
    print("\nwhere each phase's process time went (benchmarks/sharding/timings.py):")
    timings([str(out / "keys-full.json"), str(out / "keys-only.json")])
    print(f"\nfull check session {full_s:.1f} s, keys-only session {keys_s:.1f} s: "
          f"ratio {keys_s / full_s:.2f}; keys {'identical' if same else 'DIFFER'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
