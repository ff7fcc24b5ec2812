"""Report size and controller memory of a session of many checks.

Writes a repo of N tiny CPU checks (one `nn.Linear` ModelCase each, `write_linear_repo`,
reusable by other benchmarks), runs `pytest --compile-cache-check` on it at each N given,
and prints, per N: the report's bytes in all and per check, and the controller's peak RSS
(ru_maxrss, read by the repo's conftest when the session unconfigures, after the report is
written). Then the growth per check between the smallest and the largest N, against the
targets: report <= 20 KB per passing check, a 200-check report <= 5 MB, controller RSS
growth <= 0.2 MB per check.

    python benchmarks/scale/memory.py 20 100            # ~6 s per check on a 2-core CPU
    python benchmarks/scale/memory.py 20 200 -- -n 2    # pytest arguments after --
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence

REPORT_KB_PER_CHECK = 20.0
REPORT_MB_AT_200 = 5.0
RSS_MB_PER_CHECK = 0.2

TEST = '''
import pytest
import torch

from pytest_compilecache import ModelCase


@pytest.fixture
def linear():
    return ModelCase(torch.nn.Linear(16, 16), example_inputs=(torch.randn(4, 16),))


@pytest.mark.compile_cache
@pytest.mark.parametrize("i", range({n}))
def test_linear(linear, i):
    ...
'''

# the controller's peak RSS, once the plugin has written its report (neither an xdist
# worker, which has `workerinput`, nor a phase child, which has the spec's variable)
CONFTEST = '''
import json
import os
import resource


def pytest_unconfigure(config):
    if hasattr(config, "workerinput") or os.environ.get("PYTEST_COMPILECACHE_CHILD") \
            or not os.environ.get("MEMORY_OUT"):
        return
    with open("/proc/self/status") as f:  # the RSS now, beside the peak
        now = [int(line.split()[1]) for line in f if line.startswith("VmRSS:")]
    with open(os.environ["MEMORY_OUT"], "w") as f:
        json.dump({"maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                   "rss_kb": now[0] if now else None}, f)
'''


def write_linear_repo(path: Path, n: int, conftest: str = CONFTEST) -> Path:
    """A repo of `n` passing CPU checks of one nn.Linear(16, 16), parametrized in one test
    file (`test_linear.py::test_linear[0..n-1]`); `conftest` is written beside it."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "pytest.ini").write_text("[pytest]\n")
    (path / "conftest.py").write_text(textwrap.dedent(conftest))
    (path / "test_linear.py").write_text(TEST.format(n=n))
    return path


def run_session(path: Path, pytest_args: Sequence[str]) -> Dict[str, Any]:
    """One session over the repo at `path`: wall seconds, report bytes, verdicts, maxrss."""
    report, rss = path / "report.json", path / "memory.json"
    for f in (report, rss):
        if f.exists():
            f.unlink()
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env["MEMORY_OUT"] = str(rss)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                           "--compile-cache-check", f"--compile-cache-report={report}",
                           *pytest_args], cwd=path, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    if not report.exists() or not rss.exists():
        sys.exit(f"the session at {path} wrote no report or no RSS (exit {proc.returncode}):\n"
                 + (proc.stdout + proc.stderr)[-3000:])
    data, mem = json.loads(report.read_text()), json.loads(rss.read_text())
    return {"wall_s": wall, "report_bytes": report.stat().st_size,
            "checks": len(data["checks"]), "summary": data["summary"],
            "maxrss_mb": mem["maxrss_kb"] / 1024, "rss_mb": (mem.get("rss_kb") or 0) / 1024,
            "graph_bytes": sum(len(json.dumps(c.get("graphs"))) for c in data["checks"])}


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sizes", nargs="+", type=int, metavar="N")
    p.add_argument("--keep", help="write the repos here (default: a temporary dir)")
    cut = list(argv).index("--") if "--" in argv else len(argv)
    args, extra = p.parse_args(argv[:cut]), list(argv[cut + 1:])
    where = Path(args.keep or tempfile.mkdtemp(prefix="compilecache-memory-"))
    rows: List[Dict[str, Any]] = []
    print(f"{'checks':>6} {'verdicts':<22} {'wall s':>7} {'report KB':>10} {'KB/check':>9} "
          f"{'graphs KB':>10} {'peak RSS MB':>12} {'end RSS MB':>11}")
    for n in sorted(args.sizes):
        r = run_session(write_linear_repo(where / f"n{n}", n), extra)
        rows.append({"n": n, **r})
        verdicts = ", ".join(f"{v} {k}" for v, k in r["summary"].items() if k)
        print(f"{n:>6} {verdicts:<22} {r['wall_s']:>7.1f} {r['report_bytes'] / 1e3:>10.1f} "
              f"{r['report_bytes'] / 1e3 / max(1, r['checks']):>9.1f} "
              f"{r['graph_bytes'] / 1e3:>10.1f} {r['maxrss_mb']:>12.1f} {r['rss_mb']:>11.1f}",
              flush=True)
    last = rows[-1]
    per_check_kb = last["report_bytes"] / 1e3 / max(1, last["checks"])
    print(f"\nreport per check (N={last['n']}): {per_check_kb:.1f} KB, target "
          f"<= {REPORT_KB_PER_CHECK:.0f} KB: ratio {per_check_kb / REPORT_KB_PER_CHECK:.2f}")
    at_200 = per_check_kb * 200 / 1e3
    print(f"report of 200 checks ({'measured' if last['n'] == 200 else 'extrapolated'}): "
          f"{at_200:.2f} MB, target <= {REPORT_MB_AT_200:.0f} MB: ratio "
          f"{at_200 / REPORT_MB_AT_200:.2f}")
    if len(rows) > 1:
        first = rows[0]
        growth = (last["maxrss_mb"] - first["maxrss_mb"]) / (last["n"] - first["n"])
        print(f"controller peak RSS growth, N={first['n']} -> {last['n']}: "
              f"{first['maxrss_mb']:.1f} -> {last['maxrss_mb']:.1f} MB, {growth:.3f} MB per "
              f"check, target <= {RSS_MB_PER_CHECK} MB: ratio {growth / RSS_MB_PER_CHECK:.2f}")
        # the peak may be collection's (the test module imports torch): the end's RSS too
        end = (last["rss_mb"] - first["rss_mb"]) / (last["n"] - first["n"])
        print(f"controller RSS at the end, N={first['n']} -> {last['n']}: "
              f"{first['rss_mb']:.1f} -> {last['rss_mb']:.1f} MB, {end:.3f} MB per check: "
              f"ratio {end / RSS_MB_PER_CHECK:.2f}")
    print(f"repos: {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
