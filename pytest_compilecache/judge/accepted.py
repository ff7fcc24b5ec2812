"""Accepted warm-start costs: a layer's miss or bypass that a maintainer accepts as known,
for one check (`@pytest.mark.compile_cache_accept("dynamo_pgo", reason=...)`) or for the
session (`--compile-cache-accept=dynamo_pgo`).

Why it exists: a service that compiles a varying batch without a PGO job id pays one
static-then-dynamic recompile per restart; a team that does not run PGO in production
must be able to say so without changing production, and see the cost named in every
output instead of a check that always fails. The layer keeps its reasons; its state
becomes `accepted` and its problem leaves the check. Nothing else is touched: outputs,
other layers, recompiles and drift still fail as before.
Pure: no torch, no pytest.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Sequence

from pytest_compilecache.layers import unknown_layers
from pytest_compilecache.model import CheckResult

ACCEPTABLE = ("miss", "bypass")  # an `off` set in code is a switch to remove, not a cost
MARKER = "compile_cache_accept"
SESSION = "--compile-cache-accept"


def marker_problem(args: Sequence[object], kwargs: Mapping[str, object],
                   known: Sequence[str]) -> Optional[str]:
    """What is wrong with `@pytest.mark.compile_cache_accept(*layers, reason=...)`."""
    if not args:
        return f"name the layer(s) whose miss the check accepts, e.g. {MARKER}('dynamo_pgo')"
    extra = [k for k in kwargs if k != "reason"]
    if extra:
        return f"{', '.join(extra)}: it takes the layers and reason= only"
    return unknown_layers([str(a) for a in args], known)



@dataclass(frozen=True)
class Accepted:
    by: str                  # "--compile-cache-accept", "@pytest.mark.compile_cache_accept at f.py:3"
    reason: str = ""         # the maintainer's words
    per_check: bool = False  # the check's own marker (a hit says it can go)

    def __str__(self) -> str:
        return self.by + (f" ({self.reason})" if self.reason else "")



def acceptance(session: Sequence[str], marker: Sequence[str] = (), where: str = "",
               reason: str = "") -> Dict[str, Accepted]:
    """Layer -> who accepted its cost: the check's marker (its place and reason) over the
    session's option."""
    out = {name: Accepted(SESSION) for name in session}
    by = "@pytest.mark.compile_cache_accept" + (f" at {where}" if where else "")
    out.update({name: Accepted(by, reason, per_check=True) for name in marker})
    return out


def apply(res: CheckResult, accepted: Mapping[str, Accepted]) -> None:
    """Turn each accepted layer's miss or bypass into `accepted`, and take its problem off
    the check; a check failed by nothing else passes. An accepted layer that hit is said
    in a note where a check's own marker accepted it (the marker can go)."""
    for name, by in accepted.items():
        lv = res.layers.get(name)
        if lv is None:
            continue
        if lv.state not in ACCEPTABLE:
            if lv.state == "hit" and by.per_check:
                res.notes.append(f"{name}: accepted by {by}, but it hit: the acceptance can go")
            continue
        lv.reasons.insert(0, f"{lv.state}, accepted by {by}")
        lv.state, lv.accepted = "accepted", str(by)
        res.problems = [p for p in res.problems if not p.startswith(f"{name}: ")]
    res.finalize()


def apply_drift(res: CheckResult, entry: Optional[Dict[str, Any]], ref: str,
                keyed: Sequence[str]) -> None:
    """The deploy: the misses a drift accepted in the repository explains become
    `accepted` (history/accepted_drift.py); other misses, outputs and a stale entry's
    numbers still fail. A keyed miss nothing explains names the command that accepts it."""
    from pytest_compilecache.history import accepted_drift as ad

    missed = [n for n, lv in res.layers.items() if lv.state == "miss"]
    explained = ad.explained_layers(entry, res.graphs, missed, keyed)
    if explained and entry:
        changed = ", ".join(entry["components"][:6])
        apply(res, {n: Accepted(ad.FILE, changed) for n in explained})
        res.notes.append(f"the drift {ad.FILE} accepts ({changed}) explains the misses of "
                         f"{', '.join(explained)}")
    drifted = {r.get("layer") for r in res.graphs if r.get("phase") == "warm" and r.get("drift")}
    if any(n in drifted for n in missed if n not in explained):
        res.problems.append(
            f"keys changed against {ref}; if the change is meant, accept it in the repository: "
            f"`{ad.command(ref)} -- <the pytest arguments selecting the checks>` (records "
            f"their keys, writes {ad.FILE}: commit it with the change)")
        res.finalize()
