"""How warm starts evolve per commit: each clean commit's key manifest (history/store.py)
also keeps, per check, what its run measured (`run`: cold s, warm s, each layer's
state); read back over the last commits of one environment, they make a trend, and the
commits where a check got worse are flagged: a layer that hit and now misses, keys that
changed, or a warm start that rose to `alert` times the previous commit's share of the
cold compile (github-action-benchmark's default alert is 200% as well). The report
carries the trend; the job summary draws it (render/markdown.py), `trend` prints it.
Pure: no torch, no pytest.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

NOISE = ("cold s and warm s are wall seconds of each commit's run, on whatever machine "
         "ran it (a shared runner's load moves them); warm/cold and misses are what that "
         "noise does not move; `keys`: a commit whose keys were recorded only")
DEFAULT_COMMITS = 10
DEFAULT_ALERT = 2.0
BAD_STATES = ("miss", "bypass")


def run_entry(cold_s: Optional[float], warm_s: Optional[float],
              layer_states: Dict[str, str]) -> Dict[str, Any]:
    """What a check's manifest entry keeps of its run, for the trend."""
    return {"cold_s": _seconds(cold_s), "warm_s": _seconds(warm_s),
            "layers": {k: str(v) for k, v in layer_states.items()}}


def _dict(v: Any) -> Dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _seconds(v: Any) -> Optional[float]:
    return round(float(v), 2) if isinstance(v, (int, float)) and v >= 0 else None


def keys_digest(entry: Dict[str, Any]) -> Optional[str]:
    """One digest of a check's cache keys, graph for graph (None without graphs)."""
    graphs = entry.get("graphs")
    if not isinstance(graphs, dict) or not graphs:
        return None
    rows = sorted(f"{gid}={g.get('key') if isinstance(g, dict) else None}"
                  for gid, g in graphs.items())
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()[:12]


@dataclass
class Point:
    """One check at one commit."""
    cold_s: Optional[float] = None
    warm_s: Optional[float] = None
    layers: Dict[str, str] = field(default_factory=dict)
    keys: Optional[str] = None
    verdict: Optional[str] = None
    timed: bool = True  # False: keys recorded only (keys-only, a baseline, bisect)
    entry: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ratio(self) -> Optional[float]:
        if self.cold_s and self.warm_s is not None:
            return self.warm_s / self.cold_s
        return None


@dataclass
class Commit:
    sha: str
    short: str
    subject: str
    time: float
    points: Dict[str, Point] = field(default_factory=dict)  # node id -> its point


@dataclass
class Flag:
    commit: str  # short sha
    nodeid: str
    what: str


def commits(manifests: Iterable[Dict[str, Any]], last: int = DEFAULT_COMMITS,
            on_line: Callable[[str], bool] = lambda sha: True) -> List[Commit]:
    """The last `last` clean commits of the manifests (one environment's), oldest first,
    in commit time (the manifest's creation where a commit has none); `on_line`: whether
    a commit is on the line the trend follows (history/git.on_line: HEAD's ancestors)."""
    out = []
    for m in manifests:
        c = m.get("commit") or {}
        if c.get("dirty") or not isinstance(c.get("sha"), str) or c.get("sha") == "unknown":
            continue
        if not on_line(c["sha"]):  # a sibling branch's: its key changes are not this line's
            continue
        when = c.get("time")
        commit = Commit(sha=c["sha"], short=str(c.get("short") or c["sha"][:10]),
                        subject=str(c.get("subject") or ""),
                        time=float(when) if isinstance(when, (int, float)) else 0.0)
        for nodeid, entry in (m.get("checks") or {}).items():
            if not isinstance(entry, dict):
                continue
            commit.points[nodeid] = _point(entry)
            if commit.points[nodeid].keys is None and not commit.points[nodeid].timed:
                del commit.points[nodeid]  # nothing recorded that the trend reads
        if commit.points:  # a commit only recorded is not one the trend shows
            out.append((commit.time, str(m.get("created") or ""), commit))
    out.sort(key=lambda t: (t[0], t[1]))
    return [c for _, _, c in out][-last:] if last > 0 else []


def _point(entry: Dict[str, Any]) -> Point:
    """A check's point: its run where it has one, else the keys a recording of a clean
    commit wrote (they place a key change on the commit that made it, not on the
    next full run's)."""
    run: Dict[str, Any] = _dict(entry.get("run"))
    layers: Dict[str, Any] = _dict(run.get("layers"))
    return Point(cold_s=_seconds(run.get("cold_s")), warm_s=_seconds(run.get("warm_s")),
                 layers={str(k): str(v) for k, v in layers.items()}, keys=keys_digest(entry),
                 verdict=entry.get("verdict"), timed=bool(run), entry=entry)


# how many commits lie between two (None: not known), and which key components
# changed between two points' entries (the store loads them)
Count = Callable[[str, str], Optional[int]]
Explain = Callable[[Dict[str, Any], Dict[str, Any]], List[str]]


def keys_flag(prev: Commit, c: Commit, components: Sequence[str],
              count: Optional[int]) -> str:
    """Where the keys changed: since which point, how many commits that spans, the
    bisect that finds the one, and the components that changed."""
    span = f"{count} commit(s); " if count is not None else ""
    named = f": {', '.join(components[:6])}" if components else ""
    return (f"keys changed since {prev.short} ({span}`pytest-compilecache bisect "
            f"{prev.short} {c.short}`){named}")


def flags(history: Sequence[Commit], alert: float = DEFAULT_ALERT,
          count: Optional[Count] = None, explain: Optional[Explain] = None) -> List[Flag]:
    """Each commit where a check got worse than at the commit before it that ran it
    (keys: than at the one before it that recorded them)."""
    out: List[Flag] = []
    before: Dict[str, Point] = {}
    keyed: Dict[str, Any] = {}  # node id -> (commit, point) of its last keys
    for c in history:
        for nodeid, p in sorted(c.points.items()):
            was = keyed.get(nodeid)
            if p.keys:
                keyed[nodeid] = (c, p)
            if was and p.keys and was[1].keys != p.keys:
                comps = explain(was[1].entry, p.entry) if explain else []
                n = count(was[0].sha, c.sha) if count else None
                out.append(Flag(c.short, nodeid, keys_flag(was[0], c, comps, n)))
            prev = before.get(nodeid)
            if not p.timed:
                continue
            before[nodeid] = p
            if prev is None:
                continue
            for layer, state in sorted(p.layers.items()):
                if prev.layers.get(layer) == "hit" and state in BAD_STATES:
                    out.append(Flag(c.short, nodeid, f"{layer}: hit -> {state}"))
            if prev.ratio and p.ratio is not None and p.ratio >= alert * prev.ratio:
                out.append(Flag(c.short, nodeid, (
                    f"warm/cold {prev.ratio:.2f} -> {p.ratio:.2f} "
                    f"({p.ratio / prev.ratio:.1f}x, alert at {alert:g}x)")))
    return out


def totals(c: Commit) -> Dict[str, Any]:
    """A commit's checks together: their count, cold and warm seconds, misses."""
    timed = [p for p in c.points.values() if p.cold_s is not None and p.warm_s is not None]
    cold = sum(p.cold_s or 0.0 for p in timed)
    warm = sum(p.warm_s or 0.0 for p in timed)
    misses = sum(1 for p in c.points.values() for s in p.layers.values() if s in BAD_STATES)
    ran = sum(1 for p in c.points.values() if p.timed)
    return {"checks": ran, "keys_only": len(c.points) - ran, "cold_s": round(cold, 1),
            "warm_s": round(warm, 1), "ratio": round(warm / cold, 3) if cold else None,
            "misses": misses}


def to_json(history: Sequence[Commit], alert: float = DEFAULT_ALERT,
            count: Optional[Count] = None, explain: Optional[Explain] = None
            ) -> Dict[str, Any]:
    """The report's `trend`: per commit its totals, and the flags."""
    return {"alert": alert,
            "commits": [{"sha": c.sha, "short": c.short, "subject": c.subject[:80],
                         **totals(c)} for c in history],
            "flags": [{"commit": f.commit, "nodeid": f.nodeid, "what": f.what}
                      for f in flags(history, alert, count, explain)]}


def table_lines(trend: Dict[str, Any]) -> List[str]:
    """The trend as text (the `trend` command)."""
    rows = trend.get("commits") or []
    if not rows:
        return ["no clean commit's manifest in the store holds a run (each main run "
                "records one: pytest --compile-cache-check with the store on)"]
    out = [f"{'commit':<10}  {'checks':>6}  {'cold s':>8}  {'warm s':>8}  {'warm/cold':>9}  "
           f"{'misses':>6}  subject"]
    for r in rows:
        if not r.get("checks"):  # keys recorded only: a point for key changes alone
            out.append(f"{r['short']:<10}  {'keys':>6}  {'-':>8}  {'-':>8}  {'-':>9}  "
                       f"{'-':>6}  {r['subject']}")
            continue
        ratio = f"{r['ratio']:.3f}" if r.get("ratio") is not None else "-"
        out.append(f"{r['short']:<10}  {r['checks']:>6}  {r['cold_s']:>8.1f}  "
                   f"{r['warm_s']:>8.1f}  {ratio:>9}  {r['misses']:>6}  {r['subject']}")
    out.append(NOISE)
    found = trend.get("flags") or []
    out.append("")
    out.append(f"{len(found)} flag(s) (alert: warm/cold at {trend.get('alert', DEFAULT_ALERT):g}x "
               f"the commit before)" + (":" if found else ""))
    out += [f"  {f['commit']}  {f['nodeid']}: {f['what']}" for f in found]
    return out


def store_explain(store: Any) -> Explain:
    """The components that changed between two entries of `store` (history/store.py's
    ManifestStore: rows keep their components' digest, the blobs hold them); [] where
    they cannot be read (the flag still names the range and the bisect)."""
    from pytest_compilecache.history import manifest as mf

    def explain(a: Dict[str, Any], b: Dict[str, Any]) -> List[str]:
        load = store.loader({}, named_by="the trend's manifests")
        try:
            return mf.changed_components(mf.compare_check(a, b, (), load, load))
        except Exception:  # a damaged blob: the bisect the flag names says the rest
            return []
    return explain
