"""Kornia's shape in small: a git repository whose suite's conftest sets
HF_HOME while pytest collects, and CHECKS tiny nn.Linear ModelCase checks. Before the fix
GitPython (imported by the plugin for the key manifest's commit) was preloaded as the
tests' library, copied the whole environment, and every phase ran fresh.

    python benchmarks/own_deps/run.py [--checks 3] [--rounds 2] [--src before=DIR ...]

Each `--src LABEL=DIR` puts DIR (a checkout of the plugin, e.g. a `git worktree` of an
older commit) first on PYTHONPATH; `installed` is the plugin as installed. `preset` runs the
installed plugin with HF_HOME set before the session (what the conftest sets), the forked
reference. Prints, per session: seconds from start to exit, phases forked / fresh, and
the first note that says why a phase ran fresh. The key manifest store stays on (its
default, in the repository): it is what imports GitPython.
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
from typing import Dict, List, Optional

CONFTEST = 'import os\n\nos.environ["HF_HOME"] = os.path.join(os.path.dirname(__file__), "hf")\n'
TEST = '''import pytest
import torch

from pytest_compilecache import ModelCase


@pytest.fixture
def linear():
    return ModelCase(torch.nn.Linear(8, 4), example_inputs=(torch.randn(2, 8),))

'''
CHECK = "\n@pytest.mark.compile_cache\ndef test_linear_{i}(linear):\n    ...\n"


def make_repo(root: Path, checks: int) -> Path:
    repo = root / "repo"
    (repo / "suite").mkdir(parents=True)
    (repo / "pytest.ini").write_text("[pytest]\n")
    (repo / "suite" / "conftest.py").write_text(CONFTEST)  # no initial conftest: read while collecting
    (repo / "suite" / "test_linear.py").write_text(TEST + "".join(CHECK.format(i=i) for i in range(checks)))
    ident = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.com",
             "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.com"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "suite"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env={**os.environ, **ident})
    return repo


def session(repo: Path, src: Optional[str], preset: bool) -> Dict[str, object]:
    report = repo / "report.json"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "HF_HOME")}
    if src:
        env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if preset:
        env["HF_HOME"] = str(repo / "suite" / "hf")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                    "--compile-cache-check", f"--compile-cache-report={report}"], cwd=repo, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    checks = json.loads(report.read_text())["checks"]
    launches = [how for c in checks for how in c["launch"].values()]
    notes = [n for c in checks for n in c["notes"] if "fresh interpreter" in n]
    return {"wall_s": round(wall, 1), "forked": launches.count("forked"),
            "fresh": launches.count("fresh"), "verdicts": sorted({c["verdict"] for c in checks}),
            "note": notes[0] if notes else ""}


def main(argv: List[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checks", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--src", action="append", default=[], help="LABEL=DIR")
    args = ap.parse_args(argv)
    runs = [(s.split("=", 1)[0], s.split("=", 1)[1], False) for s in args.src]
    runs += [("installed", None, False), ("preset", None, True)]
    with tempfile.TemporaryDirectory() as tmp:
        repo = make_repo(Path(tmp), args.checks)
        for r in range(args.rounds):
            for label, src, preset in (runs if r % 2 == 0 else runs[::-1]):
                print(json.dumps({"round": r, "run": label, **session(repo, src, preset)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
