"""What --compile-cache-share-variants costs: the same checks with and without it,
side by side in one run, and the shared turns' share of the session's process time.

    python benchmarks/false_hits/cost.py [PYTEST ARGS]   # default: examples/ and
                                                          # benchmarks/false_hits/

Each configuration is one `pytest --compile-cache-check` session (one process at a
time) with its own JSON report in $OUT (default /tmp/out). The shared run adds one phase
per variant of a function with several; a function with one variant adds nothing.
"""
import json
import os
import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).parent


def _plugin():
    """`-p` for the plugin where its entry point is not installed (a source checkout on
    PYTHONPATH, as benchmarks/gpu_acceptance/run.sh falls back to)."""
    from importlib import metadata

    if any(e.name == "compilecache" for e in metadata.entry_points(group="pytest11")):
        return []
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(HERE.parents[1])] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    return ["-p", "pytest_compilecache.plugin"]


def session(args, extra, report):
    argv = [sys.executable, "-m", "pytest", *_plugin(), "-p", "no:cacheprovider", "-q", *args,
            "--compile-cache-check", f"--compile-cache-report={report}", *extra]
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - start
    report.with_suffix(".log").write_text(proc.stdout + proc.stderr)
    data = json.loads(report.read_text()) if report.exists() else {"checks": []}
    per_phase = {}
    for c in data["checks"]:
        for k, v in (c.get("timings") or {}).items():
            if k.endswith("_process_s") and v:
                per_phase[k[:-len("_process_s")]] = per_phase.get(k[:-len("_process_s")], 0.0) + v
    verdicts = {}
    for c in data["checks"]:
        verdicts[c["verdict"]] = verdicts.get(c["verdict"], 0) + 1
    return wall, per_phase, verdicts


def main(args):
    out = pathlib.Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    args = args or ["examples", str(HERE)]
    plain = session(args, [], out / "cost-plain.json")
    shared = session(args, ["--compile-cache-share-variants"], out / "cost-shared.json")
    for label, (wall, phases, verdicts) in (("plain", plain), ("shared", shared)):
        shown = ", ".join(f"{k} {v:.1f} s" for k, v in sorted(phases.items()))
        print(f"{label:<7} wall {wall:7.1f} s; process time by phase: {shown}; {verdicts}")
    turns = shared[1].get("shared", 0.0)
    print(f"\nshared/plain wall: {shared[0] / plain[0]:.2f}; the shared turns' share of the "
          f"shared session's process time: {turns / max(sum(shared[1].values()), 1e-9):.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
