"""A report as GitHub-flavoured Markdown: the job summary of the GitHub Action
(`pytest-compilecache show --format markdown REPORT`).

A step summary is capped at 1 MiB (larger ones are dropped whole, with an error), so
detail is given up in a fixed order until the text fits: first the passing rows, then
the length of each failure's details, then whole failure sections; every section is
built closed (fences, <details>), and the text says what was left out.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from pytest_compilecache import layers
from pytest_compilecache.judge import recompiles
from pytest_compilecache.render import lines as tx
from pytest_compilecache.render import trendchart
from pytest_compilecache.render.ranks import rank_cells
from pytest_compilecache.model import OK_VERDICTS, CheckResult

# https://docs.github.com/en/actions/reference/workflows-and-actions/workflow-commands
# ("Step isolation and limits"): 1 MiB per step summary; keep a margin for what the
# Action appends around it.
SUMMARY_LIMIT_BYTES = 1024 * 1024
SUMMARY_BUDGET_BYTES = 900 * 1024
_CELL = {"hit": "✅ hit", "miss": "❌ miss", "bypass": "⚠️ bypass", "n/a": "➖ n/a",
         "off": "➖ off", "accepted": "☑️ accepted"}
_VERDICT = {"pass": "✅", "fail": "❌", "error": "🔥", "recorded": "📝", "n/a": "➖", "not run": "⏹️",
            "skipped": "➖"}
FAILURE_LINES = 200  # a failure's details before the budget shortens them further
DRIFT_ROWS = 300


def overall_verdict(data: Dict[str, Any]) -> str:
    """pass | fail | error | skipped: an error outranks a failure; no check is skipped."""
    verdicts = [c.get("verdict") for c in data.get("checks", [])]
    if not verdicts:
        return "skipped"
    if any(v in ("error", "not run") for v in verdicts) or data.get("interrupted"):
        return "error"
    if any(v == "fail" for v in verdicts):
        return "fail"
    return "pass"


def safe_text(text: str) -> str:
    """`text` with each lone surrogate (undecodable bytes of a file name in a node id) as
    a backslash escape: valid UTF-8 to write, and its byte size measurable."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _escape(text: str) -> str:
    """A table cell: pipes would end the cell, newlines the row."""
    return text.replace("|", "\\|").replace("\n", " ")


def _fence(lines: Sequence[str]) -> str:
    body = "\n".join(lines)
    ticks = "```"
    while ticks in body:  # a fence longer than any run of backticks inside
        ticks += "`"
    return f"{ticks}text\n{body}\n{ticks}"


def title(data: Dict[str, Any], results: Sequence[CheckResult]) -> List[str]:
    v = overall_verdict(data)
    first = results[0] if results else None
    versions = (first.versions if first else {}) or {}
    device = "-"
    if first is not None:
        device = first.device or "-"
        if first.device_name and first.device_name != first.device:
            device += f" ({first.device_name})"
    counts = ", ".join(f"{n} {k}" for k, n in (data.get("summary") or {}).items() if n)
    settings = data.get("settings") or {}
    parts = [f"device {device}"]
    parts += [f"{k} {versions[k]}" for k in ("torch", "triton") if versions.get(k)]
    base = settings.get("baseline")
    if base:
        how = data.get("baseline") or {}
        parts.append(f"baseline {how.get('label') or base}" + (
            ", deploy: warm on its caches" if settings.get("baseline_warm") else "") + (
            f", keys {how['obtained']}" if how.get("obtained") else "") + (
            f" (+{how['record_s']:.0f} s)" if how.get("record_s") else ""))
    commit = (data.get("commit") or {}).get("short")
    if commit and commit != "unknown":
        parts.append(f"commit {commit}")
    lines = [f"## {_VERDICT.get(v, '')} compile-cache: {v}" + (f" ({counts})" if counts else ""),
             "", " · ".join(parts)]
    if results and {r.device for r in results if r.device} == {"cpu"}:
        lines += ["", "> [!NOTE]", "> Checks ran on CPU: Inductor built C++ kernels, so the "
                  "Triton kernel and GPU autotune layers were not exercised."]
    if data.get("no_checks"):
        lines += ["", f"> [!WARNING]\n> Nothing was checked. {data['no_checks']}."]
    if data.get("interrupted"):
        lines += ["", f"> [!WARNING]\n> The session was interrupted "
                      f"({data['interrupted'].get('by')}); checks it did not finish are `not run`."]
    return lines


def table(results: Sequence[CheckResult], passing: bool = True) -> List[str]:
    head = ("| check | verdict | " + " | ".join(layers.SHORT_MD[n] for n in layers.LAYERS) +
            " | cold s | warm s | warm/cold |")
    lines = [head, "|" + "---|" * (len(layers.LAYERS) + 5)]
    for r in results:
        if not passing and r.verdict in OK_VERDICTS:
            continue
        states, times = tx.row_cells(r)
        lines.append(f"| `{_escape(r.label)}` | {_VERDICT.get(r.verdict, '')} {r.verdict} | "
                     + " | ".join([*(_CELL.get(c, c) for c in states), *times]) + " |")
        lines += [f"| ↳ {label.strip()} | {verdict} | "
                  + " | ".join([*(_CELL.get(c, c) for c in cells), "", "", ""]) + " |"
                  for label, verdict, cells in rank_cells(r)]
    return lines


def path_table(results: Sequence[CheckResult]) -> List[str]:
    """The warm-start seconds per path (--compile-cache-via), when more than one ran."""
    paths = tx.warm_start_by_path(results)
    if not paths:
        return []
    head, rows = paths
    return [f"### {tx.WARM_START_TITLE[0].upper()}{tx.WARM_START_TITLE[1:-1]}", "",
            "| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *(f"| `{_escape(row[0])}` | " + " | ".join(row[1:]) + " |" for row in rows),
            *(["", *(f"- `{_escape(r.label)}`: n/a, {_escape(_cut(r.notes[0], 240))}"
                     for r in results if r.verdict == "n/a" and r.notes)]
              if any(r.verdict == "n/a" for r in results) else [])]


RECOMPILE_LINES = 20


def recompile_list(results: Sequence[CheckResult]) -> List[str]:
    """What each check recompiled (recompiles.lines), at most RECOMPILE_LINES."""
    rows = [f"- `{_escape(r.label)}`: {_escape(_cut(line, 400))}"
            for r in results for line in recompiles.lines(r.dynamo or {})]
    if not rows:
        return []
    if len(rows) > RECOMPILE_LINES:
        rows = rows[:RECOMPILE_LINES] + [f"- … {len(rows) - RECOMPILE_LINES} more in the JSON "
                                         f"report"]
    return [f"### {tx.RECOMPILES_TITLE[0].upper()}{tx.RECOMPILES_TITLE[1:-1]}", "", *rows]


def drift_table(results: Sequence[CheckResult]) -> List[str]:
    rows = []
    for r in results:
        d = r.drift or {}
        if d.get("status") in (None, "unchanged"):
            continue
        comps = [(g, c) for g in d.get("graphs", []) for c in g.get("components", [])]
        if not comps:
            rows.append(f"| `{_escape(r.nodeid)}` | {d.get('status')} | - | - | - | - |")
        for g, c in comps:
            if c["component"] == "gm":
                old = new = "graph code (diff in the check's section)"
            else:
                old, new = (f"`{_escape(_cut(str(c.get(k))))}`" for k in ("old", "new"))
            rows.append(f"| `{_escape(r.nodeid)}` | {d.get('status')}"
                        f"{' (accepted)' if g.get('accepted') else ''} | {g.get('graph')} | "
                        f"`{_escape(c['component'])}` | {old} | {new} |")
    if not rows:
        return []
    if len(rows) > DRIFT_ROWS:
        rows = rows[:DRIFT_ROWS] + [f"| … {len(rows) - DRIFT_ROWS} more row(s) in the JSON "
                                    f"report | | | | | |"]
    base = next((r.drift.get("base") for r in results if r.drift), None)
    return [f"### Cache keys against the baseline {base or ''}".rstrip(), "",
            "| check | status | graph | component | baseline | here |", "|---|---|---|---|---|---|",
            *rows]


def _cut(text: str, limit: int = 80) -> str:
    text = text.replace("`", "'")
    return text if len(text) <= limit else text[:limit - 1] + "…"


def failure_section(r: CheckResult, data: Dict[str, Any], max_lines: int = FAILURE_LINES) -> str:
    lines = tx.failure_lines(r)
    settings = data.get("settings") or {}
    if settings.get("baseline_warm"):
        lines.append(f"  deploy scenario: the warm run used caches built at "
                     f"{settings.get('baseline')}")
    if len(lines) > max_lines:
        lines = lines[:max_lines] + [f"… {len(lines) - max_lines} more line(s) in the JSON report"]
    return (f"<details><summary>{_VERDICT.get(r.verdict, '')} <code>{r.label}</code>: "
            f"{r.verdict}</summary>\n\n{_fence(lines)}\n\n</details>")


def render(data: Dict[str, Any], budget: int = SUMMARY_BUDGET_BYTES,
           artifact: Optional[str] = None) -> str:
    """The whole summary, at most `budget` bytes of UTF-8 (valid: see safe_text)."""
    results = [CheckResult.from_json(c) for c in data.get("checks", [])]
    failing = [r for r in results if r.verdict not in OK_VERDICTS]
    where = f"the artifact {artifact}" if artifact else "the JSON report"
    head = title(data, results)
    drift = drift_table(results)
    paths = path_table(results)
    recompiled = recompile_list(results)
    trend = trendchart.section(data.get("trend") or []) if isinstance(data.get("trend"),
                                                                      list) else []
    # (rows of passing checks?, lines per failure, failures shown), most detail first
    plans = [(True, FAILURE_LINES, len(failing)), (False, FAILURE_LINES, len(failing)),
             (False, 40, len(failing)), (False, 10, len(failing))]
    plans += [(False, 10, n) for n in (50, 10, 1, 0)]
    text = ""
    for passing, max_lines, shown in plans:
        parts = ["\n".join(head), "\n".join(table(results, passing))]
        if paths:
            parts.append("\n".join(paths))
        if recompiled:
            parts.append("\n".join(recompiled))
        dropped = []
        if not passing and len(results) > len(failing):
            dropped.append(f"{len(results) - len(failing)} passing row(s)")
        if drift:
            parts.append("\n".join(drift))
        if trend:
            parts.append("\n".join(trend))
        if failing:
            parts.append("### Failing checks\n\n" + "\n\n".join(
                failure_section(r, data, max_lines) for r in failing[:shown]))
        if max_lines < FAILURE_LINES:
            dropped.append(f"failure details beyond {max_lines} lines each")
        if shown < len(failing):
            dropped.append(f"{len(failing) - shown} failing check section(s)")
        if dropped:
            parts.append(f"_Left out to stay under GitHub's {SUMMARY_LIMIT_BYTES // 1024} KiB "
                         f"summary limit: {'; '.join(dropped)}; see {where}._")
        text = safe_text("\n\n".join(parts) + "\n")
        if len(text.encode()) <= budget:
            return text
    return text.encode()[:budget].decode(errors="ignore")  # header alone is over: cut (rare)
