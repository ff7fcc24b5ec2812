"""Dynamo's frame compiles in one phase: recompiles with the guards that caused them, the
recompile limit (after which Dynamo runs that code object eagerly, silently), and graphs
compiled again from code identical to a graph of the same run (reuse that failed).

No cache can save a model that recompiles: a regionally compiled stack whose blocks fail
each other's guards compiles per block until the limit, while every cache layer hits.
Pure: reads the cache records the children wrote (probe.py's `dynamo` section), typed
(`wire.CacheRecord`) or as JSON; its summary (`summarize`) is what the report keeps.
"""
from __future__ import annotations

import os
import re
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Union

from pytest_compilecache.layers.pgo import SHAPE_GUARDS
from pytest_compilecache.wire import CacheRecord, FrameCompile

if TYPE_CHECKING:
    from pytest_compilecache.model import CheckResult

CacheLike = Union[Dict[str, Any], CacheRecord]

# a frame compile that failed on the limit (2.13: "Dynamo recompile limit exceeded")
_LIMIT_FAILURE = re.compile(r"recompile.?limit|cache.?size.?limit", re.I)


def guard(reason: str) -> str:
    """'0/7: self.tag == 'b7'   # src  # blocks.py:26 in forward\\nUser stack...' ->
    "self.tag == 'b7' (blocks.py:26 in forward)"."""
    first = str(reason).strip().splitlines()[0] if str(reason).strip() else ""
    head, _, rest = first.partition(": ") if first[:1].isdigit() else ("", "", first)
    parts = [p.strip() for p in rest.split("#")]
    where = parts[-1] if len(parts) > 1 else ""
    if where:
        path, _, tail = where.partition(":")
        where = os.path.basename(path) + (":" + tail if tail else "")
    return parts[0] + (f" ({where})" if where else "")


def _frame(compile_id: str) -> Optional[str]:
    """'0/3' -> '0' (Dynamo numbers frames per code object, then its compiles)."""
    return compile_id.split("/")[0] if "/" in compile_id else None


def _code(entry: Union[Dict[str, Any], FrameCompile], users: Optional[Dict[str, str]] = None
          ) -> Optional[str]:
    """The compiled code as the user knows it: a torch wrapper frame (wrap_inline's
    `inner`) is named by the user's function it calls."""
    e = FrameCompile.from_json(entry)
    if not e.co_name:
        return None
    where = os.path.basename(str(e.co_filename or ""))
    line = e.co_firstlineno
    name = f"{e.co_name} ({where}:{line})" if where else str(e.co_name)
    user = (users or {}).get(name)
    return f"{user}, through torch's {name}" if user else name


def summarize(rec: CacheLike) -> Dict[str, Any]:
    """One phase: frames compiled, recompiles per code object with their guards, limits
    reached, identical graphs. Torch without `compilation_metrics` events (older than
    2.5) falls back to the cache events' compile ids."""
    rec = CacheRecord.from_json(rec)
    dyn = rec.dynamo
    compiles = list(dyn.compiles)
    if not compiles:  # counted from the graphs the caches saw
        compiles = [FrameCompile(compile_id=cid) for cid, g in rec.graphs.items()
                    if "/" in cid and g.compiled]
    reasons: Dict[str, List[str]] = defaultdict(list)  # frame -> recompile reasons
    for r in rec.recompile_reasons:
        f = _frame(str(r).split(":")[0])
        if f is not None:
            reasons[f].append(str(r))
    frames: Dict[str, Dict[str, Any]] = {}
    for e in compiles:
        f = _frame(str(e.compile_id))
        if f is None:
            continue
        row = frames.setdefault(f, {"frame": f, "code": None, "compiles": 0, "failed": 0,
                                    "guards": []})
        row["code"] = row["code"] or _code(e, dyn.user_code)
        if e.fail_type:
            row["failed"] += 1
        else:
            row["compiles"] += 1
        if e.recompile_reason and not reasons[f]:
            row.setdefault("_reasons", []).append(e.recompile_reason)
    limits = [{"limit": hit.limit, "function": hit.function,
               "guard": guard(hit.reason) if hit.reason else None} for hit in dyn.limit_hits]
    for f, row in frames.items():
        texts = reasons.get(f) or row.pop("_reasons", [])
        row.pop("_reasons", None)
        row["recompiles"] = max(0, row["compiles"] - 1)
        row["guards"] = _distinct([guard(t) for t in texts])
        row["shape_guards"] = any(g in t for t in texts for g in SHAPE_GUARDS)
    if not limits:  # the warning filtered out (TORCH_LOGS): the failed compile says it too
        for e in compiles:
            why = str(e.fail_reason or "")
            failed_row = frames.get(_frame(str(e.compile_id)) or "")
            if failed_row is not None and _LIMIT_FAILURE.search(why):
                limits.append({"limit": "its recompile limit", "function": failed_row["code"],
                               "guard": (failed_row["guards"] or [None])[-1]})
    # torch's own resets (explain's), only where there were some: records stay as they were
    by_torch = {"reset_callers": dict(dyn.reset_callers)} if dyn.reset_callers else {}
    return {"resets": int(dyn.resets or 0), **by_torch,
            "frames_compiled": sum(r["compiles"] for r in frames.values()),
            "recompiles": sum(r["recompiles"] for r in frames.values()),
            "codes": [frames[f] for f in sorted(frames, key=_order)],
            "limit_hits": limits,
            "identical_graphs": identical_graphs(rec)}


def _order(frame: str) -> Any:
    return (0, int(frame)) if frame.isdigit() else (1, frame)


def _distinct(items: List[str]) -> List[str]:
    return list(dict.fromkeys(i for i in items if i))


def identical_graphs(rec: CacheLike) -> List[List[str]]:
    """Compile ids whose forward FX graphs have the same code (their `gm` component, else
    the same FX key), in groups of two or more: each compile after the first redid work
    that a passing guard would have reused."""
    groups: Dict[str, List[str]] = defaultdict(list)
    for cid, g in CacheRecord.from_json(rec).graphs.items():
        for e in g.fx_graph:
            if e.backward:
                continue
            code = next((c[1] for c in e.components if c[0] == "gm"), None)
            ident = code or e.key
            if ident and cid not in groups[ident]:
                groups[ident].append(cid)
    return [sorted(ids, key=lambda c: [_order(x) for x in c.split("/")])
            for ids in groups.values() if len(ids) > 1]


def judge(res: "CheckResult", cold: CacheLike, warm: CacheLike,
          cold_is_other_code: bool = False) -> None:
    """Adds each phase's summary to `res.dynamo`; a recompile limit reached in either
    phase, and a warm run that recompiles more than its cold one, are problems (not
    where the cold run was another commit's code: the deploy scenario)."""
    s = {"cold": summarize(cold), "warm": summarize(warm)}
    res.dynamo = s
    reached: Dict[str, Dict[str, Optional[str]]] = defaultdict(dict)  # what -> phase -> guard
    for phase in ("cold", "warm"):
        for hit in s[phase]["limit_hits"]:
            what = f"{hit['function'] or 'a code object'} reached {hit['limit']}"
            reached[what][phase] = hit["guard"]
    for what, by_phase in reached.items():
        guards = _distinct([g for g in by_phase.values() if g])
        res.problems.append(
            f"recompiles: {what} in the {' and the '.join(by_phase)} run"
            + (f" (the guard that failed last: {'; '.join(guards)})" if guards else "")
            + ": Dynamo ran the rest of its calls eagerly, uncompiled, and no cache can save "
              "that. Make the calls pass one set of guards (the value in the guard differs "
              "per call), or raise torch._dynamo.config.recompile_limit if these recompiles "
              "are wanted")
    cw, ww = s["cold"]["recompiles"], s["warm"]["recompiles"]
    if ww > cw and not cold_is_other_code:
        cold_n = {r["frame"]: r["compiles"] for r in s["cold"]["codes"]}
        more = [f"{r['code'] or 'frame ' + r['frame']} compiled {r['compiles']} times warm, "
                f"{cold_n.get(r['frame'], 0)} cold"
                + (f", on {r['guards'][0]}" if r["guards"] else "")
                for r in s["warm"]["codes"]
                if r["compiles"] > cold_n.get(r["frame"], 0)]
        res.problems.append(f"recompiles: the warm run recompiled {ww} time(s), the cold one "
                            f"{cw}: " + "; ".join(more or ["?"]))
    res.notes += [f"recompiles: {line}" for line in lines(s)]


def lines(dynamo: Dict[str, Any]) -> List[str]:
    """What each phase recompiled, and the graphs it built twice, one line per fact
    (one for both phases where they did the same)."""
    said = {phase: _phase_lines(dynamo.get(phase) or {}) for phase in ("cold", "warm")}
    if said["cold"] == said["warm"]:
        return [f"cold and warm: {x}" for x in said["cold"]]
    return [f"{phase}: {x}" for phase in ("cold", "warm") for x in said[phase]]


def _resetters(s: Dict[str, Any]) -> str:
    """Who called torch._dynamo.reset() in a phase, in words: the test, and the torch
    functions it called that reset (torch._dynamo.explain does, twice)."""
    said = ([f"the test called torch._dynamo.reset() {s['resets']} time(s)"]
            if s.get("resets") else [])
    said += [f"{who} called torch._dynamo.reset() {n} time(s)"
             for who, n in sorted((s.get("reset_callers") or {}).items())]
    return " and ".join(said)


def _phase_lines(s: Dict[str, Any]) -> List[str]:
    out: List[str] = []
    resets = _resetters(s)
    for r in s.get("codes") or []:
        if r.get("recompiles") and not r.get("guards") and resets:
            out.append(f"{r.get('code') or 'frame ' + r['frame']} compiled {r['compiles']} "
                       f"times: {resets}, which drops compiled code; not a guard failure")
        elif r.get("recompiles"):
            guards = r.get("guards") or []
            shown = guards[:1] + (guards[-1:] if len(guards) > 1 else [])
            out.append(f"{r.get('code') or 'frame ' + r['frame']} compiled {r['compiles']} "
                       f"times ({r['recompiles']} recompile(s)"
                       + (f"; guards that failed: {' ... '.join(shown)}" if shown else "")
                       + (f"; {len(guards)} distinct" if len(guards) > 2 else "") + ")")
    for ids in s.get("identical_graphs") or []:
        out.append(f"{len(ids)} graphs of identical code were compiled "
                   f"({', '.join(ids[:4])}{' ...' if len(ids) > 4 else ''}): a guard kept "
                   f"them from reusing one compiled graph")
    return out
