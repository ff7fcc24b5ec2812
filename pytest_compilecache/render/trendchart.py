"""The trend (history/trend.py) in the job summary: per environment, a chart GitHub
renders (a Mermaid `xychart-beta`: warm/cold per commit, which a shared runner's load
moves less than the wall seconds the table gives), the commits' totals and the flagged
commits, capped so that 200 checks' history stays far under the summary's 1 MiB. Pure."""
from __future__ import annotations

from typing import Any, Dict, List

from pytest_compilecache.history.trend import NOISE

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
        timed = [r for r in rows if r.get("checks")]  # a keys-only point has no times
        if len(rows) < 2:
            continue  # one commit is no trend yet
        env = str(t.get("environment") or "")
        top = max([float(r.get("ratio") or 0) for r in timed] + [0.1])
        out += [f"### Warm starts over the last {len(rows)} commits"
                + (f" (environment `{env[:12]}`)" if len(trends) > 1 else ""), ""]
        out += ["```mermaid", "xychart-beta",
                '    title "warm/cold, all checks (a ratio: less moved by load than seconds)"',
                "    x-axis [" + ", ".join(_label(r.get("short")) for r in timed) + "]",
                f'    y-axis "warm s / cold s" 0 --> {top * 1.1:.2f}',
                "    line [" + ", ".join(f"{float(r.get('ratio') or 0):.3f}" for r in timed)
                + "]", "```", ""] if len(timed) > 1 else []
        out += [f"_{NOISE}_", "",
                "| commit | checks | cold s | warm s | warm/cold | layer misses |",
                "|---|---|---|---|---|---|"]
        for r in rows:
            if not r.get("checks"):
                out.append(f"| `{r.get('short')}` | keys | - | - | - | - |")
                continue
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
