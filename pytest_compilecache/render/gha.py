"""A report as GitHub workflow commands and step outputs
(`pytest-compilecache show --format github|outputs REPORT`), for the Action.

GitHub's limits, each from its source, live here and nowhere else.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from pytest_compilecache import layers
from pytest_compilecache.render.markdown import overall_verdict
from pytest_compilecache.render.report import summarize
from pytest_compilecache.model import OK_VERDICTS, CheckResult

# actions/toolkit docs/problem-matchers.md ("Limitations"): 10 error, 10 warning and 10
# notice annotations per step, 50 per job; the rest are dropped silently.
ANNOTATIONS_PER_STEP = 10
# docs: "Job outputs ... maximum of 1 MB per job": outputs stay small scalars.
OUTPUT_LIMIT_BYTES = 1024 * 1024
MESSAGE_LINES = 12  # lines of why per annotation: GitHub folds long ones anyway


def escape_data(text: str) -> str:
    """@actions/core command.js escapeData."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """@actions/core command.js escapeProperty."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(kind: str, message: str, **props: Any) -> str:
    inner = ",".join(f"{k}={escape_property(str(v))}" for k, v in props.items() if v is not None)
    return f"::{kind}{' ' + inner if inner else ''}::{escape_data(message)}"


def repo_path(r: CheckResult, rootdir: Optional[str], workspace: Optional[str]) -> Tuple[str, int]:
    """(file relative to the repository root, 1-based line) of a check's test function:
    a file annotation shows on the PR diff only with a repo-relative path."""
    loc = r.location or {}
    rel = loc.get("file") or r.nodeid.split("::")[0]
    if rootdir and workspace:
        full = os.path.normpath(os.path.join(rootdir, rel))
        inside = os.path.relpath(full, workspace)
        if not inside.startswith(".."):
            rel = inside
    return rel.replace(os.sep, "/"), int(loc.get("line") or 1)


def _missed(r: CheckResult) -> List[str]:
    return [n for n in layers.LAYERS if n in r.layers and r.layers[n].state in ("miss", "bypass")]


def keys_drifted(r: CheckResult, deployed: bool = False) -> bool:
    """The check's keys differ from the baseline's: compared with its manifest
    (--compile-cache-baseline), or, `deployed` (--compile-cache-baseline-warm: the local
    restart's cold run is the baseline's), a warm lookup missed with components that
    differ from its cold twin's. The deploy step said drifted=0 for a check that failed
    on exactly that. A layer whose misses a drift accepted in the repository explains
    (its state `accepted`) is no drift."""
    if (r.drift or {}).get("status") in ("drifted", "gone", "new"):
        return True
    unaccepted = {n for n, lv in r.layers.items() if lv.state != "accepted"}
    return deployed and r.via == "local" and any(
        g.get("phase") == "warm" and g.get("drift") and g.get("layer") in unaccepted
        for g in r.graphs)


def headline(r: CheckResult) -> str:
    """What went wrong, in a few words: the annotation's title."""
    missed = _missed(r)
    if missed:
        n = missed[0]
        more = f" (+{len(missed) - 1} more layer(s))" if len(missed) > 1 else ""
        return f"compile-cache: {n} {r.layers[n].state}{more}"
    if r.verdict in ("error", "not run"):
        return f"compile-cache: {r.verdict}"
    if any(p.startswith("outputs") for p in r.problems):
        return "compile-cache: outputs differ"
    if keys_drifted(r):
        return "compile-cache: key drift"
    return f"compile-cache: {r.verdict}"


def why(r: CheckResult) -> List[str]:
    lines = [f"{n}: {reason}" for n in _missed(r) for reason in r.layers[n].reasons]
    lines += [p for p in r.problems if p.split(":")[0] not in layers.LAYERS]
    if r.error:
        lines += r.error.strip().splitlines()[:4]
    if len(lines) > MESSAGE_LINES:
        lines = lines[:MESSAGE_LINES] + [f"... {len(lines) - MESSAGE_LINES} more in the job summary"]
    return lines or [f"verdict {r.verdict}"]


def _severity(r: CheckResult) -> Tuple[int, int, str]:
    return (0 if r.verdict in ("error", "not run") else 1, -len(_missed(r)), r.nodeid)


def annotation_lines(data: Dict[str, Any], workspace: Optional[str] = None) -> List[str]:
    """One ::error per failing check, worst first, at most the per-step limit, then a
    ::notice saying how many were left out; a ::notice for a CPU-only run."""
    results = [CheckResult.from_json(c) for c in data.get("checks", [])]
    failing = sorted((r for r in results if r.verdict not in OK_VERDICTS), key=_severity)
    rootdir = data.get("rootdir")
    out = []
    for r in failing[:ANNOTATIONS_PER_STEP]:
        path, line = repo_path(r, rootdir, workspace)
        out.append(command("error", "\n".join([r.label, *why(r)]), file=path, line=line,
                           title=headline(r)))
    if len(failing) > ANNOTATIONS_PER_STEP:
        out.append(command("notice", f"{len(failing) - ANNOTATIONS_PER_STEP} more failing "
                                     f"check(s) not annotated (GitHub shows "
                                     f"{ANNOTATIONS_PER_STEP} per step); see the job summary",
                           title="compile-cache"))
    if data.get("no_checks"):
        out.append(command("warning", f"Nothing was checked. {data['no_checks']}",
                           title="compile-cache"))
    if results and {r.device for r in results if r.device} == {"cpu"}:
        out.append(command("notice", "CPU-only run: the Triton kernel and GPU autotune cache "
                                     "layers were not exercised", title="compile-cache"))
    return out


def outputs(data: Dict[str, Any], report_path: str = "") -> Dict[str, str]:
    """The Action's outputs: small scalars, one line each."""
    checks = data.get("checks", [])
    results = [CheckResult.from_json(c) for c in checks]
    count = summarize(checks)  # the report's own count (a merged one's too)
    missed = sorted({n for r in results for n in _missed(r)}, key=layers.LAYERS.index)
    deployed = bool((data.get("settings") or {}).get("baseline_warm"))
    drifted = sum(1 for r in results if keys_drifted(r, deployed))
    env = _env_id(results)
    devices = sorted({r.device for r in results if r.device})
    return {"verdict": overall_verdict(data), "checks": str(len(results)),
            "passed": str(count["pass"]), "failed": str(count["fail"]),
            "errors": str(count["error"] + count["not run"]), "drifted": str(drifted),
            "layers-missed": ",".join(missed), "report-path": report_path, "env-id": env,
            "device": ",".join(devices)}


def _env_id(results: Sequence[CheckResult]) -> str:
    from pytest_compilecache.history import manifest as mf

    for r in results:
        if r.versions:
            return mf.environment_id(mf.environment_of(r.to_json()))
    return ""


def output_lines(values: Dict[str, str]) -> List[str]:
    """`name=value` lines for $GITHUB_OUTPUT; a value is never multiline here."""
    return [f"{k}={' '.join(str(v).split())}" for k, v in values.items()]
