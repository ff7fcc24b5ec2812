"""The preloaded launcher against `--compile-cache-launcher=fresh` on CPU, side by side.

    python benchmarks/launcher/run.py [--rounds 2] [--cases examples,thirty] [--out DIR]

Per round and case, the two launchers one after the other, in an order that alternates
between rounds: one `pytest --compile-cache-check` session each (`--compile-cache-store=
none`, `--compile-cache-device=cpu`), timed from start to exit. Cases: `examples` (the
repository's examples/, two checks) and `thirty` (a generated test file of 30 tiny
marked models, inference only). The preloaded sessions share one launcher-state
dir, as a user's sessions do. Prints each session's wall and its phases' median start-up
(the report's `<phase>_startup_s`, the wait for the preloaded interpreter included), then
per case and round the ratio preloaded / fresh against issue 54's bar (the preloaded
launcher keeps its place where it saves 5% of session wall: ratio <= 0.95).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from collections import Counter
from typing import Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[2]
LAUNCHERS = ("preloaded", "fresh")
KEEP_BAR = 0.95  # issue 54 point 3: kept where it saves at least 5% of session wall

# thirty tiny models: widths vary so that no two checks compile the same graph
THIRTY = '''
import pytest
import torch

from pytest_compilecache import ModelCase


class Tiny(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.l1 = torch.nn.Linear(width, width)
        self.l2 = torch.nn.Linear(width, 4)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x))).sin()


@pytest.fixture(params=range(30), ids=lambda i: f"w{8 + i}")
def tiny(request):
    width = 8 + request.param
    return ModelCase(Tiny(width), example_inputs=(torch.randn(4, width),))


@pytest.mark.compile_cache
def test_tiny(tiny):
    ...
'''


def targets(out: Path) -> Dict[str, Tuple[Path, str]]:
    """Each case: the directory the session runs in and the path it collects."""
    gen = out / "thirty"
    gen.mkdir(parents=True, exist_ok=True)
    (gen / "test_thirty.py").write_text(THIRTY)
    return {"examples": (ROOT / "examples", "."), "thirty": (gen, "test_thirty.py")}


def session(where: Tuple[Path, str], launcher: str, report: Path, state: Path,
            log: Path) -> float:
    cwd, path = where
    argv = [sys.executable, "-m", "pytest", path, "-p", "no:cacheprovider", "-q",
            "--compile-cache-check", "--compile-cache-store=none",
            "--compile-cache-device=cpu", f"--compile-cache-launcher={launcher}",
            f"--compile-cache-launcher-state={state}", f"--compile-cache-report={report}"]
    t0 = time.perf_counter()
    with open(log, "a") as f:
        f.write(f"== {' '.join(argv)}\n")
        f.flush()
        rc = subprocess.run(argv, cwd=cwd, stdout=f, stderr=subprocess.STDOUT).returncode
    wall = time.perf_counter() - t0
    if rc not in (0, 1):  # 1: a check failed (examples' scorer does, by design)
        print(f"    the session exited {rc}: see {log}", flush=True)
    return wall


def startups(report: Path) -> Dict[str, object]:
    """The median start-up of the session's cold and warm phases (s), and its verdicts
    (the same under both launchers, or the comparison means nothing)."""
    if not report.exists():
        return {}
    checks = json.loads(report.read_text())["checks"]
    out: Dict[str, object] = {"verdicts": dict(Counter(c["verdict"] for c in checks))}
    for phase in ("cold", "warm"):
        xs = [c["timings"].get(f"{phase}_startup_s") for c in checks]
        xs = [x for x in xs if x is not None]
        if xs:
            out[phase] = statistics.median(xs)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cases", default="examples,thirty")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/launcher-bench"))
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    where = targets(out)
    cases = a.cases.split(",")
    walls: Dict[str, Dict[str, List[float]]] = {c: {k: [] for k in LAUNCHERS} for c in cases}
    for r in range(a.rounds):
        for case in cases:
            for k in (LAUNCHERS if r % 2 == 0 else LAUNCHERS[::-1]):
                rep = out / f"{case}-{k}-{r}.json"
                w = session(where[case], k, rep, out / "state", out / "sessions.log")
                walls[case][k].append(w)
                seen = startups(rep)
                verdicts = seen.pop("verdicts", {})
                st = ", ".join(f"{ph} {s:.2f} s" for ph, s in seen.items())
                print(f"round {r} {case} {k}: {w:.1f} s; median phase start-up: {st}; "
                      f"verdicts {verdicts}", flush=True)
    (out / "launcher.json").write_text(json.dumps(walls, indent=1))
    print(f"\npreloaded / fresh session wall (kept where <= {KEEP_BAR})")
    for case in cases:
        pairs = zip(walls[case]["preloaded"], walls[case]["fresh"])
        for r, (p, f) in enumerate(pairs):
            verdict = "saves 5% or more" if p / f <= KEEP_BAR else "under 5%"
            print(f"{case} round {r}: {p:.1f} s / {f:.1f} s = {p / f:.3f} ({verdict})")


if __name__ == "__main__":
    main()
