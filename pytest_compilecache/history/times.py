"""The last time each check took (`<store>/times.json`): every check's processes
together, written when it ends, so that the next session hands its checks out longest
first (controller/order.py) without a report passed in. A locked read-merge-write like
the manifests'; a damaged file reads as no times (it only orders). Pure: filelock, no
torch, no pytest."""
from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any, Dict, Mapping

from pytest_compilecache import jsonfile
from pytest_compilecache.files import write_json_atomic

SCHEMA = "pytest-compilecache-times"
KEEP = 5000  # entries kept, the latest written


def path_of(store: Path) -> Path:
    return Path(store) / "times.json"


def read(store: Path) -> Dict[str, float]:
    """Seconds per check (each warm-start path's processes added up); {} without a file
    or with an unusable one."""
    try:
        data = jsonfile.load(path_of(store))
    except (OSError, jsonfile.Unreadable):
        return {}
    entries = (data.get("checks") if isinstance(data, dict) and data.get("schema") == SCHEMA
               else None)
    out: Dict[str, float] = {}
    for e in (entries.values() if isinstance(entries, dict) else ()):
        if (isinstance(e, dict) and isinstance(e.get("nodeid"), str)
                and isinstance(e.get("s"), (int, float)) and e["s"] > 0):
            out[e["nodeid"]] = out.get(e["nodeid"], 0.0) + float(e["s"])
    return out


def record(store: Path, nodeid: str, via: str, seconds: float) -> None:
    """Keep what one check's run through one warm-start path took."""
    from pytest_compilecache.history.store import ManifestStore

    p = path_of(store)
    # the store's own lock, which makes its .gitignore (it never makes a tree dirty)
    with ManifestStore(store).lock("times", timeout=600):
        try:
            data: Any = jsonfile.load(p)
        except (OSError, jsonfile.Unreadable):
            data = None
        checks: Dict[str, Any] = (dict(data.get("checks") or {}) if isinstance(data, dict)
                                  and data.get("schema") == SCHEMA
                                  and isinstance(data.get("checks"), dict) else {})
        checks[f"{nodeid} [{via}]"] = {
            "nodeid": nodeid, "s": round(float(seconds), 2),
            "at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
        if len(checks) > KEEP:
            checks = dict(sorted(checks.items(), key=lambda kv: str(
                kv[1].get("at") if isinstance(kv[1], dict) else ""))[-KEEP:])
        write_json_atomic(p, {"schema": SCHEMA, "checks": checks}, sort_keys=True)


def process_seconds(timings: Mapping[str, Any]) -> float:
    """A check's cost: its phases' processes, as the shard times count it."""
    num = {k: v for k, v in timings.items() if isinstance(v, (int, float)) and v > 0}
    return (sum(v for k, v in num.items() if k.endswith("_process_s")) or
            sum(v for k, v in num.items() if k in ("cold_s", "warm_s")))
