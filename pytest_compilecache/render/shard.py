"""Splitting checks over CI machines and merging their reports back into one.

Deterministic: every machine (and every xdist worker) computes the same slices from
the node ids alone, or from the times of a previous report. Pure: no pytest, no torch.
"""
from __future__ import annotations

import json
import sys
from typing import Any, Dict, Iterable, List, Optional, Set

from pytest_compilecache import jsonfile
from pytest_compilecache.render.report import problem, summarize


class BadTimes(ValueError):
    """--compile-cache-shard-times names a file that is not a usable report: one line
    naming the file and the repair (the plugin makes it a usage error, before any check
    runs, never an INTERNALERROR)."""


def times_from_report(path: str) -> Dict[str, float]:
    """Seconds each check took in a previous report (both phases' processes). A check
    whose timings are not numbers costs what an unknown one does."""
    repair = ("pass the --compile-cache-report of an earlier full run, or drop "
              "--compile-cache-shard-times (the slices are then by node id)")
    try:
        data = jsonfile.load(path)
    except (OSError, jsonfile.Unreadable) as e:
        said = e if isinstance(e, jsonfile.Unreadable) else f"{path} cannot be read: {e}"
        raise BadTimes(f"--compile-cache-shard-times: {said}; {repair}") from None
    wrong = problem(data)
    if wrong:
        raise BadTimes(f"--compile-cache-shard-times: {path}: {wrong}; {repair}")
    out: Dict[str, float] = {}
    for c in data["checks"]:
        t = c.get("timings") if isinstance(c.get("timings"), dict) else {}
        num = {k: v for k, v in t.items() if isinstance(v, (int, float)) and v > 0}
        total = (sum(v for k, v in num.items() if k.endswith("_process_s")) or
                 sum(v for k, v in num.items() if k in ("cold_s", "warm_s")))
        if total:  # every warm-start path of a check runs on the same shard
            out[c["nodeid"]] = out.get(c["nodeid"], 0.0) + float(total)
    return out


def select(nodeids: Iterable[str], index: int, count: int,
           times: Optional[Dict[str, float]] = None) -> Set[str]:
    """Slice `index` (1-based) of `count`: round robin by sorted node id, or, with
    times, longest-first onto the least-loaded slice (unknown checks cost the median)."""
    ids = sorted(set(nodeids))
    if not times:
        return {n for k, n in enumerate(ids) if k % count == index - 1}
    known = sorted(t for n, t in times.items() if n in ids)
    default = known[len(known) // 2] if known else 1.0
    cost = {n: times.get(n, default) for n in ids}
    loads = [0.0] * count
    mine: Set[str] = set()
    for n in sorted(ids, key=lambda n: (-cost[n], n)):
        k = min(range(count), key=lambda j: (loads[j], j))
        loads[k] += cost[n]
        if k == index - 1:
            mine.add(n)
    return mine


def merge_reports(reports: List[Dict[str, Any]]) -> Dict[str, Any]:
    """One report from several machines' reports; a check present twice keeps the later."""
    if not reports:
        raise ValueError("nothing to merge")
    by_id: Dict[str, Dict[str, Any]] = {}
    for r in reports:
        for c in r.get("checks", []):
            key = f"{c['nodeid']} [{c.get('via') or 'local'}]"
            if key in by_id:
                print(f"pytest-compilecache merge: {key} is in more than one report; "
                      f"keeping the later one", file=sys.stderr)
            by_id[key] = c
    merged = dict(reports[0])
    # each machine's trend covers its own slice only: `pytest-compilecache trend` over the
    # store shows the whole
    merged.pop("trend", None)
    # the newest of the versions merged: its reader reads the older reports' checks too
    merged["schema_version"] = max(r.get("schema_version") or 1 for r in reports)
    merged["checks"] = [by_id[n] for n in sorted(by_id)]
    merged["summary"] = summarize(merged["checks"])
    merged["no_checks"] = next((r.get("no_checks") for r in reports if r.get("no_checks")),
                               None) if not merged["checks"] else None
    merged["merged_from"] = [{"created": r.get("created"), "commit": r.get("commit"),
                              "settings": r.get("settings"), "checks": len(r.get("checks", []))}
                             for r in reports]
    commits = {json.dumps(r.get("commit"), sort_keys=True) for r in reports}
    if len(commits) > 1:
        merged["commit"] = None
        print("pytest-compilecache merge: the reports come from different commits",
              file=sys.stderr)
    return merged
