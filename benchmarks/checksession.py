"""One `pytest --compile-cache-check` session a benchmark times: its wall seconds and its
report's checks by node id (the log and report under OUT). Shared by keys_only/ and
pr_lane/, which put this folder on sys.path."""
import json
import pathlib
import subprocess
import sys
import time


def session(cwd, out, name, args, extra):
    report = out / f"{name}.json"
    argv = [sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider", "-q",
            "--compile-cache-check", f"--compile-cache-report={report}", *extra]
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=cwd)
    wall = time.perf_counter() - start
    pathlib.Path(out / f"{name}.log").write_text(proc.stdout + proc.stderr)
    data = json.loads(report.read_text()) if report.exists() else {"checks": []}
    return wall, {c["nodeid"]: c for c in data["checks"]}
