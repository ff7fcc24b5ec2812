"""What a check comes to, as every process and tool reads it: a layer's verdict and the
check's result (what the JSON report holds per check), and the one rule that makes its
verdict. The wire it is judged from, a phase child's record, is wire.py's. Pure, no
torch, no pytest: the controller, the renderers, the CLI and the Action share it.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Dict, List, Optional


# verdicts that fail nothing: n/a is a warm-start path this torch or workload cannot take
OK_VERDICTS = ("pass", "recorded", "n/a")


@dataclass
class LayerVerdict:
    state: str                 # hit | miss | bypass | off | n/a | accepted
    cold: str = ""             # what the cold run did, e.g. "miss 2, saved 2"
    warm: str = ""             # what the warm run did
    reasons: List[str] = field(default_factory=list)
    files: List[str] = field(default_factory=list)  # files the warm run added
    setting: Optional[str] = None  # the config setting that switched the layer off
    # a miss or bypass the maintainer accepts as a known cost (judge/accepted.py): by whom
    accepted: Optional[str] = None


# the timing a path's warm start is, where that is not its private warm run's `warm_s`
# (the shared variants' turn over their one cache; None: no turn ran)
WARM_START_KEY = "warm_start_s"


@dataclass
class CheckResult:
    nodeid: str
    verdict: str               # pass | fail | error
    device: Optional[str] = None
    device_name: Optional[str] = None
    form: Optional[str] = None
    versions: Dict[str, Any] = field(default_factory=dict)
    layers: Dict[str, LayerVerdict] = field(default_factory=dict)
    graphs: List[Dict[str, Any]] = field(default_factory=list)
    outputs: Dict[str, Any] = field(default_factory=dict)
    timings: Dict[str, Optional[float]] = field(default_factory=dict)
    problems: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    error: Optional[str] = None
    cache_root: Optional[str] = None
    drift: Dict[str, Any] = field(default_factory=dict)    # against --compile-cache-baseline
    repeat: Dict[str, Any] = field(default_factory=dict)   # second cold run, relocated
    leases: List[Dict[str, Any]] = field(default_factory=list)  # device slot per phase
    job_id: Dict[str, Any] = field(default_factory=dict)  # PGO job id per phase, and its source
    location: Dict[str, Any] = field(default_factory=dict)  # test file (rootdir-relative), line
    via: str = "local"  # the warm-start path checked (--compile-cache-via)
    dynamo: Dict[str, Any] = field(default_factory=dict)  # per phase: recompiles.summarize
    launch: Dict[str, str] = field(default_factory=dict)  # per phase: forked, fresh or stored
    # --compile-cache-share-variants: what this variant loaded of the entries other
    # variants wrote into the cache they share, and how its outputs there compared
    shared: Dict[str, Any] = field(default_factory=dict)
    # a multi-rank check (compile_cache(ranks=N)): each rank's layers, outputs, problems
    # (a replicated check's, compile_cache(replicas=N): each replica's, its row's `noun`)
    ranks: List[Dict[str, Any]] = field(default_factory=list)
    # What `finalize` derives the verdict from, never reported: the verdict the result was
    # made with (`kind`: pass, recorded, n/a, error, not run); a fault of the environment
    # or of a server (a full disk, a store refused, Redis gone) that makes it an `error`
    # whatever its problems; an error that is the path's own failure (`WarmStartPath.failed`:
    # a loader that crashed, a crash on a damaged cache), which fails it.
    kind: Optional[str] = None
    fault: bool = False
    error_fails: bool = False

    @property
    def label(self) -> str:
        """The node id, and the warm-start path when it is not the local restart."""
        return self.nodeid if self.via == "local" else f"{self.nodeid} [via {self.via}]"

    def finalize(self) -> "CheckResult":
        """The one rule that makes the verdict, run again whenever what it reads changed
        (a judge, then what the session adds: drift, the repeat run, damage, an accepted
        cost): an interrupted check is `not run`; a fault, or an error that is not the
        path's failure, is `error`; any problem, or the path's failure, is `fail`;
        otherwise the verdict the result was made with (pass, recorded, n/a)."""
        if self.kind is None:
            self.kind = self.verdict
        if self.kind == "not run":
            self.verdict = "not run"
        elif self.fault or (self.kind == "error" and not self.error_fails):
            self.verdict = "error"
        elif self.problems or self.error_fails:
            self.verdict = "fail"
        else:
            self.verdict = self.kind
        return self

    def summary_row(self) -> "CheckResult":
        """What the end of a session reads of a check (the terminal summary, the kept
        cache roots, the environment a baseline's gone checks are looked up in, the
        report's counts): the rest of the result is on disk (controller/spool.py)."""
        drift: Dict[str, Any] = {k: self.drift[k] for k in ("status", "base") if k in self.drift}
        if self.drift.get("graphs"):
            drift["graphs"] = [{"change": g.get("change"), "accepted": g.get("accepted"),
                                "components": [{"component": c["component"]}
                                               for c in g.get("components", [])]}
                               for g in self.drift["graphs"]]
        return CheckResult(
            nodeid=self.nodeid, verdict=self.verdict, kind=self.kind, device=self.device,
            device_name=self.device_name, versions=self.versions, via=self.via,
            cache_root=self.cache_root, notes=self.notes[:1 if self.verdict == "n/a" else 4],
            drift=drift, layers={n: LayerVerdict(state=lv.state, accepted=lv.accepted,
                                                 reasons=lv.reasons[:2] if lv.accepted else [])
                                 for n, lv in self.layers.items()},
            timings={k: self.timings[k] for k in self.timings
                     if k in ("cold_s", "warm_s", "cold_process_s", WARM_START_KEY)},
            dynamo=self.dynamo, outputs=self._eager_summary(),
            ranks=[{"rank": x.get("rank"), "noun": x.get("noun"),
                    "verdict": x.get("verdict"),
                    "layers": {n: {"state": (s or {}).get("state")}
                               for n, s in (x.get("layers") or {}).items()}}
                   for x in self.ranks])

    def _eager_summary(self) -> Dict[str, Any]:
        """Of the outputs, what the summary says of compiled vs eager: how many tensors
        it judged of how many, how many change with the seed (render/lines.eager_coverage);
        and why it compared none, where it did not."""
        out = self.outputs or {}
        unseen = {"unseen": out["unseen"]} if out.get("unseen") else {}  # lines._unseen_lines
        e = out.get("warm_vs_eager") or out.get("cold_vs_eager")
        if not isinstance(e, dict):
            return unseen
        kept = {k: e[k] for k in ("ok", "compared", "total") if k in e}
        if e.get("note"):
            kept["note"] = str(e["note"])[:300]
        kept["random_count"] = (len(out.get("random") or []) or e.get("random_count")
                                or len(e.get("random") or []))
        return {"warm_vs_eager": kept, **unseen}

    def to_json(self) -> Dict[str, Any]:
        d = asdict(self)
        for internal in _VERDICT_INPUTS:
            d.pop(internal, None)
        return d

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "CheckResult":
        names = {f.name for f in fields(cls)}  # a newer report's extra keys are skipped
        d = {k: v for k, v in data.items() if k in names}
        known = {f.name for f in fields(LayerVerdict)}  # a newer layer's extra keys too
        d["layers"] = {k: LayerVerdict(**{n: x for n, x in v.items() if n in known})
                       for k, v in (d.get("layers") or {}).items()}
        return cls(**d)


# the result's kind stays in the report (a keys-only recording that drift failed is a
# `fail` of kind `recorded`: `show REPORT` keeps its seconds out of `cold s`)
_VERDICT_INPUTS = ("fault", "error_fails")


def error_result(nodeid: str, phase: str, why: str, log_tail: str,
                 timings: Dict[str, Optional[float]]) -> CheckResult:
    text = f"{phase} phase {why}"
    if log_tail:
        text += "\n--- last lines of its output ---\n" + log_tail
    return CheckResult(nodeid=nodeid, verdict="error", error=text, timings=timings)
