"""The data a check produces, as every process and tool reads it: the cache layers'
names, a layer's verdict and the check's result (what the JSON report holds per check).
Pure, no torch, no pytest: the controller, the renderers, the CLI and the Action share it.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Dict, List, Optional

LAYERS = ("dynamo_pgo", "aot_autograd", "fx_graph", "kernels", "autotune")
# each layer's column heading: in the terminal table, in markdown
SHORT = {"dynamo_pgo": "pgo", "aot_autograd": "aot", "fx_graph": "fx", "kernels": "kernels",
         "autotune": "autotune"}
SHORT_MD = {"dynamo_pgo": "PGO", "aot_autograd": "AOT", "fx_graph": "FX", "kernels": "kernels",
            "autotune": "autotune"}
KEYED = ("aot_autograd", "fx_graph")  # the layers whose entries have keys
# verdicts that fail nothing: n/a is a warm-start path this torch or workload cannot take
OK_VERDICTS = ("pass", "recorded", "n/a")
# warm-vs-cold differences below this are the size of reordered float atomics, not of a
# wrong kernel (seen on an H200: 1.8e-7 in BERT's embedding grad, 4.2e-7 in MobileNet's)


@dataclass
class LayerVerdict:
    state: str                 # hit | miss | bypass | off | n/a
    cold: str = ""             # what the cold run did, e.g. "miss 2, saved 2"
    warm: str = ""             # what the warm run did
    reasons: List[str] = field(default_factory=list)
    files: List[str] = field(default_factory=list)  # files the warm run added


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
    launch: Dict[str, str] = field(default_factory=dict)  # per phase: forked or fresh

    @property
    def label(self) -> str:
        """The node id, and the warm-start path when it is not the local restart."""
        return self.nodeid if self.via == "local" else f"{self.nodeid} [via {self.via}]"

    def to_json(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "CheckResult":
        names = {f.name for f in fields(cls)}  # a newer report's extra keys are skipped
        d = {k: v for k, v in data.items() if k in names}
        d["layers"] = {k: LayerVerdict(**v) for k, v in (d.get("layers") or {}).items()}
        return cls(**d)


def error_result(nodeid: str, phase: str, why: str, log_tail: str,
                 timings: Dict[str, Optional[float]]) -> CheckResult:
    text = f"{phase} phase {why}"
    if log_tail:
        text += "\n--- last lines of its output ---\n" + log_tail
    return CheckResult(nodeid=nodeid, verdict="error", error=text, timings=timings)
