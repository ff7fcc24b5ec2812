"""Sharding benchmark: the same eight model checks with 1 GPU and with k GPUs (and K
jobs per GPU), side by side in one run; prints wall times and speed-ups.

    bash benchmarks/device.sh run python benchmarks/sharding/run.py 1x1 2x1 2x2 2x1o

A configuration is GPUSxJOBS_PER_GPU; a trailing "o" adds --compile-cache-warm-on-other-gpu
(the warm phase runs on another GPU than the cold one). The base of the speed-ups is 1x1
(else the first configuration). The configurations share one store ($OUT/sharding-store):
each hands its checks out longest first by the times the earlier ones left there (the
first runs in collection order); each line says which order its checks started in.

Each configuration is one `pytest -n GPUS*JOBS --compile-cache-check` session over
benchmarks/sharding with its own report and log under $OUT (or /tmp/out). On 2 H200s the
four default configurations take about 15 minutes (1x1: 5-6): on the device tool, run it
with `bash benchmarks/device.sh start sharding python benchmarks/sharding/run.py`, then
`... wait sharding`. benchmarks/device.sh sets TRITON_PTXAS_PATH (docs/gpu-results.md).
"""
import json
import os
import pathlib
import subprocess
import sys
import time

from timings import phase_edges

HERE = pathlib.Path(__file__).parent


def started(checks):
    """The checks in the order their first phase got a slot (their leases)."""
    def first(c):
        times = [lease.get("acquired") for lease in c.get("leases") or []
                 if isinstance(lease.get("acquired"), (int, float))]
        return min(times) if times else float("inf")

    return [c["nodeid"].split("[")[-1].rstrip("]") for c in sorted(checks, key=first)]


SCHEDULE_LIMIT = 1.1  # issue 54: a session at most 1.1x its own processes' schedule
SLOWDOWN_LIMIT = 1.2  # and K jobs on a GPU slow its check processes by under 20%


def launches(checks):
    """How the phases started: forked from a preloaded interpreter or fresh, with the
    first reason a phase gave for starting fresh (the report's notes): a session whose
    phases all start fresh pays a whole interpreter's start-up per phase."""
    kinds = [k for c in checks for k in (c.get("launch") or {}).values()]
    why = next((n for c in checks for n in c.get("notes") or []
                if "ran in a fresh interpreter" in n), None)
    return (f"{kinds.count('forked')} of {len(kinds)} phases forked"
            + (f"; {why}" if why else ""))


def check_seconds(checks):
    """Each check's process seconds, its phases one after another (cold, warm, ...)."""
    return [sum(v for k, v in (c.get("timings") or {}).items()
                if k.endswith("_process_s") and v) for c in checks]


def schedule(durations, slots):
    """The longest-first schedule's makespan of `durations` over `slots` parallel slots:
    what the session would take if nothing but its own check processes cost time."""
    ends = [0.0] * max(1, slots)
    for d in sorted(durations, reverse=True):
        i = ends.index(min(ends))
        ends[i] += d
    return max(ends)


def floor(workers):
    """Seconds plain pytest-xdist takes, without the plugin, to start `workers` workers,
    collect this benchmark's module in each and exit (every test deselected: xdist
    ignores -n with --collect-only): what any session of it pays before a check runs."""
    argv = [sys.executable, "-m", "pytest", str(HERE), "-p", "no:cacheprovider",
            "-p", "no:compilecache", "-q", "-k", "not test_model", "-n", str(workers)]
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    took = time.perf_counter() - start
    if proc.returncode not in (0, 5):  # 5: every test deselected, as meant
        print(f"the floor's plain session failed ({proc.returncode}): "
              f"{(proc.stdout + proc.stderr)[-500:]}", file=sys.stderr)
    return took


def print_limits(rows):
    """Each configuration against its limits: wall / the longest-first schedule of its
    own check processes (beside the per-GPU speed-up, never alone; and less plain
    pytest-xdist's start and collection), and for K jobs per GPU the check processes'
    seconds against the same GPUs with one job each."""
    print(f"\nagainst the limits: wall / longest-first schedule of its check processes "
          f"(limit {SCHEDULE_LIMIT}); check-process s / same GPUs x1 (limit {SLOWDOWN_LIMIT})")
    one = {gpus: busy for _, gpus, jobs, _, busy, _, _, _ in rows if jobs == 1}
    for cfg, gpus, jobs, wall, busy, _, sched, plain in rows:
        line = (f"{cfg:<8} wall {wall:.1f} s / schedule {sched:.1f} s = {wall / sched:.2f}"
                + (" over" if wall / sched > SCHEDULE_LIMIT else "")
                + f" (less plain xdist's start and collection, {plain:.1f} s: "
                  f"{(wall - plain) / sched:.2f})")
        if jobs > 1 and one.get(gpus):
            slow = busy / one[gpus]
            line += (f"; processes {busy:.1f} s / {gpus}x1's {one[gpus]:.1f} s = {slow:.2f}"
                     + (" over" if slow > SLOWDOWN_LIMIT else ""))
        print(line)


def main(configs):
    out = pathlib.Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if not env.get("TRITON_PTXAS_PATH"):
        print("TRITON_PTXAS_PATH is not set: Triton's kernels may compile again on restart "
              "(docs/gpu-results.md); run this through `bash benchmarks/device.sh run`",
              file=sys.stderr)
    rows = []
    for cfg in configs:
        other = cfg.endswith("o")
        gpus, jobs = (int(x) for x in cfg.rstrip("o").split("x"))
        report = out / f"sharding-{cfg}.json"
        argv = [sys.executable, "-m", "pytest", str(HERE), "-p", "no:cacheprovider", "-q",
                "--compile-cache-check", f"--compile-cache-report={report}",
                f"--compile-cache-gpus={','.join(str(i) for i in range(gpus))}",
                # default options: TF32 (resnet50 1.3e-2 from eager on an H200) and backward
                # atomics (warm gradients ~1e-7 from cold) are the float64 rule's to judge
                f"--compile-cache-jobs-per-gpu={jobs}", "-n", str(gpus * jobs),
                f"--compile-cache-store={out / 'sharding-store'}"]
        if other:
            argv.append("--compile-cache-warm-on-other-gpu")
        plain = floor(gpus * jobs)
        start = time.perf_counter()
        proc = subprocess.run(argv, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        (out / f"sharding-{cfg}.log").write_text(proc.stdout + proc.stderr)
        data = json.loads(report.read_text()) if report.exists() else {"checks": []}
        seconds = check_seconds(data["checks"])
        busy, sched = sum(seconds), schedule(seconds, gpus * jobs)
        verdicts = {}
        for c in data["checks"]:
            verdicts[c["verdict"]] = verdicts.get(c["verdict"], 0) + 1
        rows.append((cfg, gpus, jobs, wall, busy, verdicts, sched, plain))
        print(f"{cfg}: {wall:.1f} s wall, {busy:.1f} s of check processes, {verdicts}", flush=True)
        print(f"  started: {', '.join(started(data['checks']))}", flush=True)
        print(f"  {launches(data['checks'])}", flush=True)
        first, last = phase_edges(data)
        if first is not None:  # the rest of the wall: the session's start and end
            print(f"  phases from {first:.1f} s to {last:.1f} s of the controller's "
                  f"{data['timeline']['report']:.1f} s", flush=True)
    base = next((r[3] for r in rows if r[0] == "1x1"), rows[0][3])
    print(f"\n{'config':<8} {'gpus':>4} {'jobs/gpu':>8} {'wall s':>8} {'speed-up':>8} "
          f"{'per gpu':>8} {'check-process s':>15}  verdicts")
    for cfg, gpus, jobs, wall, busy, verdicts, *_ in rows:
        speed = base / wall
        print(f"{cfg:<8} {gpus:>4} {jobs:>8} {wall:>8.1f} {speed:>8.2f} {speed / gpus:>8.2f} "
              f"{busy:>15.1f}  {verdicts}")
    print_limits(rows)


if __name__ == "__main__":
    main(sys.argv[1:] or ["1x1", "2x1", "2x2", "2x1o"])
