"""The wire between the controller and a phase child: the spec the controller writes
(`PhaseSpec`) and the record the child writes back, typed for the judges (`PhaseRecord`
and its sections; `wirejson.Wire` says how a section reads JSON). Pure, no torch, no
pytest.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Mapping, Optional, TypedDict, Union

from pytest_compilecache.wirejson import Wire

# --------------------------------------------------------------------------------------
# The wire: what a phase child writes (child/phase.py, child/probe.py, child/compare.py,
# the path's "artifact" record), typed for the judges. `PhaseRecord.from_json` reads the
# JSON as the judges always have: a missing key takes the field's default (older torch
# versions and failed phases omit sections), a null section (a record whose cache
# observer never stopped writes `"cache": null`) reads as empty, and an unknown key (a
# newer child) is skipped. Payloads the judges pass on unread (outputs' dtypes, key
# components, versions, a comparison as the report shows it) stay plain JSON.

WIRE_VERSION = 1


class PhaseSpec(TypedDict, total=False):
    """What the controller tells a phase child (`phases/<phase>-spec.json`, written by
    controller/check.py, read by child/phase.py): the wire's other direction."""
    wire_version: int
    phase: str            # cold | warm | fresh | repeat | reseeded
    nodeid: str
    out: str              # where the child writes its PhaseRecord
    device: str
    seed: int
    tolerance: Any        # --compile-cache-warm-tolerance
    eager_tolerance: Any  # --compile-cache-eager-tolerance
    cold_outputs: str     # the cold phase's outputs, compared by the next
    launcher_pid: int
    timeout_s: float      # --compile-cache-timeout: its stacks are dumped just before
    job_id_source: str
    root: str             # the check's private cache root
    private: Dict[str, str]  # the cache settings the child keeps private
    cuda_index: int
    path: str             # the warm-start path's registry name (paths/)
    via: str
    artifact: Optional[str]  # save | load
    artifact_path: str
    watched: Dict[str, str]
    save_outputs: str
    compare_outputs: str
    python_seed: int      # seeds Python's random and numpy's instead of `seed` (replay.py)
    rank: int             # a fleet phase's process index (controller/fleet.py, child/ranks.py)
    world_size: int       # the phase's processes
    process_group: bool   # they form one process group (ranks), else independent (replicas)
    ranks_abort: str      # the file that says another rank of the phase failed

# -- the cache record (probe.py's CacheObserver.record) --------------------------------

@dataclass
class CacheEntry(Wire):
    """One FX-graph or AOTAutograd cache lookup of a graph."""
    state: str = "miss"                  # hit | miss | bypass
    key: Optional[str] = None
    backward: bool = False
    bypass_reason: Optional[str] = None
    detail: Optional[str] = None         # torch's cache_status_detailed: "guard_miss"
    guard_expr: Optional[str] = None
    components: List[Any] = field(default_factory=list)  # [[name, hash, value]]: opaque
    compile_id: str = ""                 # the graph's Dynamo compile id (its graphs key)


@dataclass
class PgoIO(Wire):
    read: int = 0
    written: int = 0


@dataclass
class GraphEvents(Wire):
    """What the caches saw of one compile id."""
    fx_graph: List[CacheEntry] = field(default_factory=list)
    aot_autograd: List[CacheEntry] = field(default_factory=list)
    pgo: PgoIO = field(default_factory=PgoIO)

    def entries(self, layer: str) -> List[CacheEntry]:
        return self.fx_graph if layer == "fx_graph" else self.aot_autograd

    @property
    def compiled(self) -> bool:
        """A graph Inductor compiled (looked up in a graph cache)."""
        return bool(self.fx_graph or self.aot_autograd)


@dataclass
class LayerConfig(Wire):
    """Whether this torch has a layer and its config enables it, and why not."""
    enabled: bool = True
    why: Optional[str] = None
    no_job_id: bool = False
    off: bool = False      # a setting switched it off (its row reads `off`, not `n/a`)
    in_code: bool = False  # ...the test's own code did: the check fails
    setting: Optional[str] = None  # that setting, "torch._inductor.config.fx_graph_cache = False"


@dataclass
class FrameCompile(Wire):
    """One Dynamo frame compile (its `compilation_metrics` event, torch 2.5+)."""
    compile_id: Optional[str] = None
    co_name: Optional[str] = None
    co_filename: Optional[str] = None
    co_firstlineno: Optional[int] = None
    fail_type: Optional[str] = None
    fail_reason: Optional[str] = None
    recompile_reason: Optional[str] = None


@dataclass
class LimitHit(Wire):
    """Dynamo's warning that a code object reached its recompile limit."""
    limit: Optional[str] = None
    function: Optional[str] = None
    reason: Optional[str] = None


@dataclass
class DynamoRecord(Wire):
    compiles: List[FrameCompile] = field(default_factory=list)
    limit_hits: List[LimitHit] = field(default_factory=list)
    resets: Optional[int] = 0  # torch._dynamo.reset() called by the test's own code
    reset_callers: Dict[str, int] = field(default_factory=dict)  # torch's functions: count
    skipped: List[str] = field(default_factory=list)  # torch's "skipping: ..." lines
    code_ids: Dict[str, Any] = field(default_factory=dict)   # code -> its closure hash
    user_code: Dict[str, str] = field(default_factory=dict)  # torch's wrapper -> user's
    # code -> what its closure hash depends on ("address", "strings": probe.py)
    hash_inputs: Dict[str, List[str]] = field(default_factory=dict)


@dataclass
class CacheRecord(Wire):
    """What a phase's caches did (probe.py's CacheObserver.record): what every layer
    reads (counters, each graph's cache lookups and profile reads, Dynamo's frame
    compiles, each layer's config) and, in `sections`, each layer's own observer's
    record under the layer's `section` key, as written: the layer types it
    (`CacheLayer.section_of`)."""
    wall_s: Optional[float] = None
    counters: Dict[str, Dict[str, int]] = field(default_factory=dict)
    graphs: Dict[str, GraphEvents] = field(default_factory=dict)
    recompile_reasons: List[str] = field(default_factory=list)
    dynamo: DynamoRecord = field(default_factory=DynamoRecord)
    layer_config: Dict[str, LayerConfig] = field(default_factory=dict)
    sections: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Any) -> "CacheRecord":
        if isinstance(data, cls):
            return data
        rec = super().from_json(data)
        if isinstance(data, dict):  # every key no field reads is a layer's section
            known = {f.name for f in fields(cls)}
            rec.sections = {k: v for k, v in data.items() if k not in known}
        for cid, g in rec.graphs.items():  # each entry knows its graph
            for e in g.fx_graph + g.aot_autograd:
                e.compile_id = cid
        return rec

    def counter(self, group: str, name: str) -> int:
        return int((self.counters.get(group) or {}).get(name, 0))

    def entries(self, layer: str) -> List[CacheEntry]:
        """Every lookup of a keyed layer, in compile order."""
        return [e for g in self.graphs.values() for e in g.entries(layer)]


# -- the output comparisons (child/compare.py) -------------------------------------------

@dataclass
class Mismatch(Wire):
    name: str = "?"
    message: Optional[str] = ""
    max_abs_diff: Optional[float] = None
    float64: Optional[Dict[str, Any]] = None  # the float64 rule's numbers, when it judged
    random: bool = False                       # changes with the random seed


@dataclass
class WithinNoise(Wire):
    """A tensor that differs bitwise, within arithmetic noise."""
    name: str = "?"
    max_abs_diff: Optional[float] = None
    diff_rmse: Optional[float] = None
    limit: Optional[float] = None
    random: bool = False
    no_reference: bool = False  # its float64 run could not judge: assert_close's defaults did


@dataclass
class RandomTensor(Wire):
    name: str = "?"


@dataclass
class Float64Reference(Wire):
    available: bool = False
    note: Optional[str] = None
    unusable_miss: Optional[float] = None


@dataclass
class ColdComparison(Wire):
    """A later phase's outputs against an earlier one's (compare_with_cold)."""
    ok: Optional[bool] = None
    mode: Optional[str] = None
    mismatches: List[Mismatch] = field(default_factory=list)
    within_noise: List[WithinNoise] = field(default_factory=list)
    incomparable: List[Mismatch] = field(default_factory=list)  # other shapes: other inputs
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)  # as written


@dataclass
class EagerComparison(Wire):
    """Compiled outputs against eager ones (compare_with_eager), or why not (`note`)."""
    ok: Optional[bool] = None
    note: Optional[str] = None
    total: Optional[int] = None
    mismatches: List[Mismatch] = field(default_factory=list)
    random: List[RandomTensor] = field(default_factory=list)
    float64: Float64Reference = field(default_factory=Float64Reference)
    ungated_gradients: List[str] = field(default_factory=list)
    gradient_rel_error: Optional[float] = 0
    incomparable: List[Mismatch] = field(default_factory=list)  # other shapes: other inputs
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)  # as written


# -- a warm-start path's record (paths/*.py, the child's side) -------------------------

@dataclass
class ArtifactRecord(Wire):
    na: Optional[str] = None        # why the path cannot take this workload
    error: Optional[str] = None     # the path failed: its artifact missing or unreadable
    files: Dict[str, int] = field(default_factory=dict)     # the cache root after the load
    watched: Dict[str, str] = field(default_factory=dict)   # cache dirs by name
    load_s: Optional[float] = None
    bytes: Optional[int] = 0
    counts: Dict[str, int] = field(default_factory=dict)    # artifacts per kind
    cold_ran: Optional[str] = None  # "eager": the cold process only built the artifact
    ignored_options: List[str] = field(default_factory=list)
    torch_said: List[str] = field(default_factory=list)
    # as written: a path's own section (`info[<path name>]`) is the path's to type
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


# -- a phase record (child/phase.py's ChildPlugin.result) ------------------------------

@dataclass
class PhaseRecord(Wire):
    """What one phase child wrote. `from_json(dict)` is how every judge reads one."""
    phase: str = ""
    nodeid: str = ""
    error: Optional[str] = None
    ran: bool = False
    internal_step: Optional[str] = None  # a step of the plugin's own machinery failed
    device: Optional[str] = None
    device_name: Optional[str] = None
    cuda_index: Optional[int] = None
    cuda_visible: Optional[str] = None   # CUDA_VISIBLE_DEVICES of the phase (its GPUs)
    form: Optional[str] = None           # model_case | test_body
    versions: Dict[str, Any] = field(default_factory=dict)
    job_id: Dict[str, Any] = field(default_factory=dict)  # {value, source}, passed on
    cache: CacheRecord = field(default_factory=CacheRecord)
    outputs: Dict[str, Any] = field(default_factory=dict)  # name -> dtype, shape
    compare_eager: Optional[EagerComparison] = None
    compare_cold: Optional[ColdComparison] = None
    random_note: Optional[str] = None
    compiled_calls: Optional[int] = None  # outermost compiled calls the test body made
    # digests of the random states at each outermost compiled call's entry (child/replay.py)
    rng_trail: List[Dict[str, str]] = field(default_factory=list)
    # the per-process generators (random, numpy) the test drew from (child/replay.py)
    drew: List[str] = field(default_factory=list)
    # the installed libraries the test imported after the seed: a draw may be theirs
    imported_after_seed: List[str] = field(default_factory=list)
    # where the eager re-run's random state parted from the compiled run's: {call, generators}
    eager_parted: Dict[str, Any] = field(default_factory=dict)
    artifact: ArtifactRecord = field(default_factory=ArtifactRecord)
    # set by the controller, not the child, after a turn over the cache the variants
    # share (controller/variants.seen_by): this variant, the entries others wrote
    variants: Dict[str, Any] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)
    marks: Dict[str, float] = field(default_factory=dict)
    reclaimed: List[str] = field(default_factory=list)
    escaped: List[str] = field(default_factory=list)
    wire_version: int = WIRE_VERSION  # records before the wire was versioned are 1
    # the JSON as the child wrote it, for what passes it on unread (the key manifest's
    # rows, the variants' ledger, a recorded test case)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


RecordLike = Union[Dict[str, Any], PhaseRecord]


def phase_records(recs: Mapping[str, Any]) -> Dict[str, PhaseRecord]:
    """The phase records a path judges, typed (each read once; typed ones kept)."""
    return {phase: PhaseRecord.from_json(rec) for phase, rec in recs.items()}
