"""The steps of the GitHub Action (`action/action.yml`), so that its logic is Python
that tests can run: `python -m pytest_compilecache.action detect|run|conclude`.

Every input arrives as an environment variable `CC_<INPUT>` (never interpolated into a
script). `run` always exits 0 after writing the summary, the annotations and the outputs,
so that the upload steps still run; `conclude` applies `fail-on` last.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from pytest_compilecache import jsonfile
from pytest_compilecache.render import gha
from pytest_compilecache.render import markdown
from pytest_compilecache.model import OK_VERDICTS

FAIL_ON = ("fail", "drift", "never")
SESSION_OK = (0, 1, 5)  # pytest: all passed, some failed, none collected
PYTEST_EXIT = {2: "interrupted, or an error during collection", 3: "an internal error",
               4: "a usage error"}
DEVICES = ("auto", "cpu", "cuda")
JOBS_PER_GPU = 2  # measured on 2 H200s: 2 per GPU ran 8 models in 127 s, 1 in 213 s
# (the plugin's --compile-cache-jobs-per-gpu default is the same 2)


class InputError(Exception):
    """A bad input: one ::error line naming the input, exit 2."""


def _env(name: str, default: str = "") -> str:
    return os.environ.get(f"CC_{name.upper().replace('-', '_')}", "").strip() or default


def _choice(name: str, default: str, choices: Sequence[str]) -> str:
    v = _env(name, default).lower()
    if v not in choices:
        raise InputError(f"input {name}: {v!r} is not one of {', '.join(choices)}")
    return v


def write_outputs(values: Dict[str, str]) -> None:
    path = os.environ.get("GITHUB_OUTPUT")
    lines = gha.output_lines(values)
    if path:
        with open(path, "a", encoding="utf-8", errors="backslashreplace") as f:
            f.write("\n".join(lines) + "\n")
    else:
        print("\n".join(lines))


def append_summary(text: str) -> None:
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if path:
        with open(path, "a", encoding="utf-8", errors="backslashreplace") as f:
            f.write(text)


# -- detect ------------------------------------------------------------------------------
def detect() -> int:
    """The environment id (the manifest cache key needs it before the run) and the
    device; a CPU-only runner with require-gpu: true is an error here."""
    from pytest_compilecache.controller import gpus
    from pytest_compilecache.history import manifest as mf
    from pytest_compilecache.child.workload import environment_of_python

    device = _choice("device", "auto", DEVICES)
    require = _choice("require-gpu", "auto", ("auto", "true", "false"))
    visible = gpus.visible_gpus()
    if require == "true" and not visible:
        raise InputError("require-gpu is true but this runner exposes no GPU (no "
                         "CUDA_VISIBLE_DEVICES, /proc/driver/nvidia or nvidia-smi): run the "
                         "job on a GPU runner, or set require-gpu: auto to check on CPU")
    if device == "auto":
        device = "cuda" if visible else "cpu"
    if device == "cuda" and not visible:
        raise InputError("device is cuda but this runner exposes no GPU")
    try:
        env = environment_of_python(device)
    except subprocess.CalledProcessError as e:
        raise InputError("could not import torch with this Python "
                         f"({sys.executable}): install the model repo (and torch) in a step "
                         f"before this action, or set the input python. "
                         + " ".join((e.stderr or "").strip().splitlines()[-1:])) from None
    write_outputs({"env-id": mf.environment_id(env), "device": device,
                   "gpu-count": str(len(visible)), "artifact-name": artifact_name()})
    return 0


def artifact_name() -> str:
    """Unique per job, shard and attempt: artifacts are immutable and a name may be
    used once per run (upload-artifact v4+); a plain matrix sets the input."""
    given = _env("artifact-name")
    if given:
        return given
    parts = ["compilecache", os.environ.get("GITHUB_JOB", "job"),
             _env("shard").replace("/", "of"), os.environ.get("GITHUB_RUN_ATTEMPT", "")]
    return "-".join(p for p in parts if p)


# -- run ---------------------------------------------------------------------------------
def private_dirs(temp: str) -> Tuple[Path, Path]:
    """A cache root and lock dir of this job alone: concurrent jobs on one self-hosted
    host, and caches earlier jobs left, never touch its verdicts."""
    tag = "-".join(x for x in (os.environ.get("GITHUB_RUN_ID"), os.environ.get("GITHUB_RUN_ATTEMPT"),
                               os.environ.get("GITHUB_JOB"), _env("shard").replace("/", "of"))
                   if x) or str(os.getpid())
    base = Path(temp) / f"compilecache-{tag}"
    root, locks = base / "roots", base / "locks"
    for d in (base, root, locks):
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(d, 0o700)
    return root, locks


def baseline_ref() -> Optional[str]:
    """The input, else the PR's base commit on pull_request, else none (a push)."""
    v = _env("baseline")
    if v.lower() == "none":
        return None
    if v:
        return v
    if os.environ.get("GITHUB_EVENT_NAME", "").startswith("pull_request"):
        return _env("event-base") or None
    return None


def pytest_argv(report: str, root: Path, locks: Path, device: str, gpu_count: int) -> List[str]:
    argv = [sys.executable, "-m", "pytest", *shlex.split(_env("pytest-args")),
            "--compile-cache-check", f"--compile-cache-report={report}",
            f"--compile-cache-root={root}", f"--compile-cache-lock-dir={locks}",
            f"--compile-cache-device={device}"]
    store = _env("manifest-store")
    if store:
        argv.append(f"--compile-cache-store={store}")
    base = baseline_ref()
    deploy = _choice("deploy", "false", ("true", "false")) == "true"
    if base:
        argv.append(f"--compile-cache-baseline={base}")
        if deploy:
            argv.append("--compile-cache-baseline-warm")
    elif deploy:
        raise InputError("deploy is true but there is no baseline: set the input baseline "
                         "(on push there is no PR base to deploy from)")
    if _choice("compile-caches", "false", ("true", "false")) == "true":
        if _choice("manifest-cache", "true", ("true", "false")) != "true":
            raise InputError("compile-caches is true but manifest-cache is false: the compile "
                             "caches travel in the manifest cache")
        # kept only by a push to the default branch (the action's save step is gated the
        # same way): a PR run never leaves code for another run to execute
        if _env("saves") == "true" and store and not (base and deploy):
            argv.append("--compile-cache-store-caches")
    if _env("shard"):
        argv.append(f"--compile-cache-shard={_env('shard')}")
    jobs = _env("jobs", "auto")
    if jobs == "auto":  # xdist shares the GPUs out by leases; without it, one at a time
        import importlib.util

        xdist = importlib.util.find_spec("xdist") is not None
        jobs = str(JOBS_PER_GPU * gpu_count) if device == "cuda" and gpu_count and xdist else ""
    if jobs and jobs not in ("0", "1"):
        if not jobs.isdigit():
            raise InputError(f"input jobs: {jobs!r} is not a number or auto")
        argv += ["-n", jobs]
    return argv


def run() -> int:
    temp = os.environ.get("RUNNER_TEMP") or os.environ.get("TMPDIR") or "/tmp"
    fail_on = _choice("fail-on", "fail", FAIL_ON)  # checked before an hour of compiling
    device = _env("device-detected") or _choice("device", "auto", DEVICES)
    if device == "auto":
        from pytest_compilecache.controller import gpus

        device = "cuda" if gpus.visible_gpus() else "cpu"
    gpu_count = int(_env("gpu-count", "0") or 0)
    out_dir = Path(_env("out-dir") or Path(temp) / "compilecache-out")
    out_dir.mkdir(parents=True, exist_ok=True)
    report = _env("report-path") or str(out_dir / "compilecache-report.json")
    root, locks = private_dirs(temp)
    argv = pytest_argv(report, root, locks, device, gpu_count)
    if os.path.exists(report):
        os.remove(report)  # a report left by an earlier step must not pass for this run's
    print("::group::pytest " + " ".join(shlex.quote(a) for a in argv[1:]), flush=True)
    started = time.monotonic()
    rc = subprocess.call(argv)
    print("::endgroup::", flush=True)
    print(f"pytest exited {rc} after {time.monotonic() - started:.0f} s", flush=True)
    values, text, notes = conclude_report(report, rc, _env("artifact"))
    for line in notes:
        print(line, flush=True)
    keep_for_upload(report, out_dir)
    summary, annotated = out_dir / "compilecache-summary.md", out_dir / "compilecache-annotations.txt"
    summary.write_text(text, encoding="utf-8", errors="backslashreplace")
    annotated.write_text("".join(f"{line}\n" for line in notes), encoding="utf-8",
                         errors="backslashreplace")
    append_summary(text)
    values["summary-path"], values["annotations-path"] = str(summary), str(annotated)
    values["pytest-exit"] = str(rc)
    values["fail-on"] = fail_on
    write_outputs(values)
    return 0


def keep_for_upload(report: str, out_dir: Path) -> None:
    """The report and each failing check's phase logs into the artifact's folder (the
    cache roots themselves run to gigabytes and hold code: they stay on the runner)."""
    import re
    import shutil

    try:
        data = jsonfile.load(report)
    except (OSError, ValueError):
        return
    if Path(report).resolve().parent != out_dir.resolve():
        shutil.copy2(report, out_dir / Path(report).name)
    for c in data.get("checks", []):
        if c.get("verdict") in OK_VERDICTS or not c.get("cache_root"):
            continue
        logs = sorted(Path(c["cache_root"]).glob("phases/*.log"))
        if logs:
            dest = out_dir / "logs" / re.sub(r"[^A-Za-z0-9_.-]+", "_", c["nodeid"])[-120:]
            dest.mkdir(parents=True, exist_ok=True)
            for log in logs:
                shutil.copy2(log, dest / log.name)


def conclude_report(report: str, rc: int, artifact: str) -> Tuple[Dict[str, str], str, List[str]]:
    """(outputs, summary, annotation lines) from the report pytest wrote; without one,
    an error that says pytest's exit code, never a verdict about the models."""
    try:
        data = jsonfile.load(report)
        from pytest_compilecache.render import report as rp

        why = rp.problem(data)
    except (OSError, ValueError) as e:
        data, why = None, f"none readable at {report}: {e.__class__.__name__}"
    if data is None or why:
        if rc == 5:  # pytest: no tests collected
            return dict(gha.outputs({"checks": []}, ""), verdict="skipped", **{"session-ok": "true"}), (
                "## ➖ compile-cache: skipped\n\nNo test was selected (pytest exit 5): check "
                "the input pytest-args and the compile_cache marker.\n"), []
        msg = (f"pytest exited {rc} without a usable report ({why}): the session failed "
               f"before any verdict (a collection or usage error?); see this step's log")
        return (dict(gha.outputs({"checks": []}, ""), verdict="error", **{"session-ok": "false"}),
                f"## 🔥 compile-cache: error\n\n{msg}\n",
                [gha.command("error", msg, title="compile-cache: error")])
    values = gha.outputs(data, report)
    text = markdown.render(data, artifact=artifact or None)
    notes = gha.annotation_lines(data, os.environ.get("GITHUB_WORKSPACE"))
    if rc not in SESSION_OK:  # a collection, usage or internal error: no verdict to trust
        msg = (f"pytest exited {rc} ({PYTEST_EXIT.get(rc, 'an unexpected exit code')}): the "
               f"checks' verdicts are incomplete; see this step's log")
        values["verdict"] = "error"
        notes.insert(0, gha.command("error", msg, title="compile-cache: error"))
        text = f"> [!CAUTION]\n> {msg}\n\n" + text
    values["session-ok"] = "true" if rc in SESSION_OK else "false"
    return values, text, notes


# -- conclude ----------------------------------------------------------------------------
def exit_status(verdict: str, drifted: int, fail_on: str, session_ok: bool) -> int:
    """fail: a failing or erroring check fails the job; drift: so does key drift against
    the baseline; never: report only. A session that broke (no report, a collection or
    usage error) is always an error, whatever fail-on says."""
    if not session_ok:
        return 2
    if fail_on == "never":
        return 0
    if verdict in ("fail", "error") or (fail_on == "drift" and drifted):
        return 1
    return 0


def conclude() -> int:
    verdict = _env("verdict", "error")
    fail_on = _choice("fail-on", "fail", FAIL_ON)
    code = exit_status(verdict, int(_env("drifted", "0") or 0), fail_on,
                       _env("session-ok") == "true")
    if code:
        print(gha.command("error", f"compile-cache verdict: {verdict} (fail-on: {fail_on}); "
                                   f"see the job summary", title="compile-cache"))
    return code


def main(argv: Optional[Sequence[str]] = None) -> int:
    from pytest_compilecache.cli import safe_output

    safe_output()  # a node id with undecodable bytes is printed escaped, never a crash
    args = list(sys.argv[1:] if argv is None else argv)
    steps = {"detect": detect, "run": run, "conclude": conclude}
    if len(args) != 1 or args[0] not in steps:
        print(f"usage: python -m pytest_compilecache.action {'|'.join(steps)}", file=sys.stderr)
        return 2
    try:
        return steps[args[0]]()
    except InputError as e:
        print(gha.command("error", str(e), title="compile-cache: input"), flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
