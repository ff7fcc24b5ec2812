"""The trend (history/trend.py) in the job summary: per environment, a chart GitHub
renders (a Mermaid `xychart-beta`: the checks' cold seconds as bars, warm seconds as a
line, per commit), the commits' totals and the flagged commits, capped so that 200
checks' history stays far under the summary's 1 MiB. Pure."""
from __future__ import annotations

from typing import Any, Dict, List

FLAG_ROWS = 60


def _label(text: Any) -> str:
    return '"' + str(text).replace('"', "'")[:7] + '"'


def section(trends: List[Dict[str, Any]]) -> List[str]:
    out: List[str] = []
    for t in trends:
        if not isinstance(t, dict):
            continue
        if t.get("error"):
            out += ["### Warm starts per commit", "", f"_{t['error']}_"]
            continue
        rows = [r for r in t.get("commits") or [] if isinstance(r, dict)]
        if len(rows) < 2:
            continue  # one commit is no trend yet
        env = str(t.get("environment") or "")
        top = max([float(r.get("cold_s") or 0) for r in rows] + [1.0])
        out += [f"### Warm starts over the last {len(rows)} commits"
                + (f" (environment `{env[:12]}`)" if len(trends) > 1 else ""), "",
                "```mermaid", "xychart-beta",
                '    title "cold s (bars) and warm s (line), all checks"',
                "    x-axis [" + ", ".join(_label(r.get("short")) for r in rows) + "]",
                f'    y-axis "seconds" 0 --> {top * 1.1:.0f}',
                "    bar [" + ", ".join(f"{float(r.get('cold_s') or 0):.1f}" for r in rows) + "]",
                "    line [" + ", ".join(f"{float(r.get('warm_s') or 0):.1f}" for r in rows) + "]",
                "```", "",
                "| commit | checks | cold s | warm s | warm/cold | layer misses |",
                "|---|---|---|---|---|---|"]
        for r in rows:
            ratio = f"{r['ratio']:.3f}" if isinstance(r.get("ratio"), (int, float)) else "-"
            out.append(f"| `{r.get('short')}` | {r.get('checks')} | {r.get('cold_s')} | "
                       f"{r.get('warm_s')} | {ratio} | {r.get('misses')} |")
        flags = [f for f in t.get("flags") or [] if isinstance(f, dict)]
        out += ["", f"{len(flags)} flagged (alert: warm/cold at {t.get('alert', 2):g}x the "
                    f"commit before; a layer from hit to miss; changed keys)"
                    + (":" if flags else "."), ""]
        if flags:
            out += ["| commit | check | what |", "|---|---|---|"]
            out += [f"| `{f.get('commit')}` | `{f.get('nodeid')}` | {f.get('what')} |"
                    for f in flags[:FLAG_ROWS]]
            if len(flags) > FLAG_ROWS:
                out.append(f"| … {len(flags) - FLAG_ROWS} more in the JSON report | | |")
    return out
