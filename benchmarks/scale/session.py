"""A session of many checks as a model repo with 200 of them runs it: N tiny
CPU checks (`memory.write_linear_repo`) plus a few that fail (a constant drawn at import:
every process traces another graph, so the warm run misses and computes other numbers),
under `-n 2 -q`. Prints what a maintainer reads and waits for, against the targets:

- the terminal summary: failures first, the passes folded into one count under -q
  (its lines are printed, and how many of them there are);
- the report's bytes (<= 5 MB at 200 checks) and the job summary's (< 1 MiB, GitHub's
  limit for one step's summary);
- `show`, `diff` (the report against itself) and `merge` (the report cut in two halves,
  as two shards) on that report: seconds each, against 1 s.

    python benchmarks/scale/session.py 200            # ~10 min on a 2-core CPU
    python benchmarks/scale/session.py 40 --failing 2 -- -n 2
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).parent))
from memory import write_linear_repo  # noqa: E402

REPORT_MB = 5.0
SUMMARY_BYTES = 1 << 20  # GitHub's limit for a step's job summary
TOOL_S = 1.0

FAILING = '''
import random

import pytest
import torch

from pytest_compilecache import ModelCase

SHIFT = random.random()  # drawn at import: another graph in every process


class Shifted(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) + SHIFT


@pytest.fixture
def shifted():
    return ModelCase(Shifted(), example_inputs=(torch.randn(4, 16),))


@pytest.mark.compile_cache
@pytest.mark.parametrize("i", range({n}))
def test_shifted(shifted, i):
    ...
'''


def timed(argv: Sequence[str], cwd: Path) -> Tuple[float, subprocess.CompletedProcess]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest_compilecache", *argv], cwd=cwd,
                          capture_output=True, text=True)
    return time.monotonic() - started, proc


def summary_section(out: str) -> List[str]:
    lines = out.splitlines()
    start = next((i for i, line in enumerate(lines) if "compile-cache summary" in line), len(lines))
    return lines[start:]


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checks", type=int, help="passing checks")
    p.add_argument("--failing", type=int, default=3, help="failing checks besides them")
    p.add_argument("--keep", help="write the repo here (default: a temporary dir)")
    cut = list(argv).index("--") if "--" in argv else len(argv)
    args, extra = p.parse_args(argv[:cut]), list(argv[cut + 1:]) or ["-n", "2"]
    repo = write_linear_repo(Path(args.keep or tempfile.mkdtemp(prefix="compilecache-scale-"))
                             / "repo", args.checks, conftest="")
    (repo / "test_shifted.py").write_text(FAILING.format(n=args.failing))
    report = repo / "report.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                           "--compile-cache-check", f"--compile-cache-report={report}",
                           *extra], cwd=repo, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    if not report.exists():
        sys.exit(f"no report (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    summary = summary_section(proc.stdout)
    print(f"session: {args.checks} passing + {args.failing} failing checks, "
          f"pytest {' '.join(extra)} -q: {wall:.0f} s, exit {proc.returncode}")
    print(f"--- its compile-cache summary ({len(summary)} lines) ---")
    print("\n".join(summary[:40] + (["..."] if len(summary) > 40 else [])))
    print("---")
    data = json.loads(report.read_text())
    n = len(data["checks"])
    mb = report.stat().st_size / 1e6
    print(f"report: {mb:.2f} MB for {n} checks ({mb * 1e3 / max(1, n):.1f} KB a check); "
          f"scaled to 200: {mb * 200 / max(1, n):.2f} MB, target <= {REPORT_MB:.0f} MB: ratio "
          f"{mb * 200 / max(1, n) / REPORT_MB:.2f}")
    took, md = timed(["show", "--format", "markdown", str(report)], repo)
    size = len(md.stdout.encode())
    print(f"job summary (show --format markdown): {size / 1024:.1f} KiB, target < 1024 KiB: "
          f"ratio {size / SUMMARY_BYTES:.3f}")
    halves = []
    for i, part in enumerate((data["checks"][: n // 2], data["checks"][n // 2:])):
        f = repo / f"shard{i}.json"
        f.write_text(json.dumps(dict(data, checks=part)))
        halves.append(str(f))
    tools = [("show", took, md)]
    tools.append(("diff", *timed(["diff", str(report), str(report)], repo)))
    tools.append(("merge", *timed(["merge", *halves, "-o", str(repo / "merged.json")], repo)))
    for name, secs, out in tools:
        print(f"{name:<6} {secs:.2f} s (exit {out.returncode}), target < {TOOL_S:.0f} s: "
              f"ratio {secs / TOOL_S:.2f}")
        if out.returncode not in (0, 1):
            print(out.stderr[-2000:])
    print(f"repo: {repo}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
