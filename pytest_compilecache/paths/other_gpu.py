"""A restart on another GPU (--compile-cache-warm-on-other-gpu[=index|pinned]): the cold
phase on one GPU, the warm phase on the next over the same cache directories, as a
service whose processes land on any device of the machine.

With both GPUs visible (`index`), torch's keys hold the device index of every input, so
the warm run misses (named by the key components). Where entries are shared across GPUs
(`pinned`: each process sees its GPU as cuda:0, the layout the docs recommend; or a
torch that keys no device), an entry built on GPU i answers on GPU j: exactly where a
false hit would hide (pytorch#188390, a key blind to the device). There the warm run is
compared with a fresh compile on GPU j, not with GPU i's cold run."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from pytest_compilecache.judge.outputs import fresh_reference
from pytest_compilecache.model import CheckResult
from pytest_compilecache.wire import PhaseRecord, RecordLike, phase_records
from pytest_compilecache.paths.base import PhasePlan, Records, Snapshots
from pytest_compilecache.paths.local import LocalRestart

_WARM_VS_COLD = "outputs: warm differs from cold ("


class OtherGpu(LocalRestart):
    """Cold on GPU i, warm on GPU j; where the warm run loaded entries, a fresh compile
    on GPU j (an empty root) is the warm run's reference."""
    name = "other_gpu"
    summary = ""  # not a --compile-cache-via value: --compile-cache-warm-on-other-gpu
    selectable = False
    storable = False  # its warm run is another GPU's or a shared root's: not a plain restart
    phases: Tuple[PhasePlan, ...] = (
        PhasePlan("cold"), PhasePlan("warm", keeps_outputs=True, other_gpu=True),
        PhasePlan("fresh", fresh_root=True, compare_with="warm", other_gpu=True))

    def __init__(self, layout: str = "index") -> None:
        self.gpu_layout = layout  # index | pinned (scenarios/other_gpu.py)

    @classmethod
    def from_settings(cls, settings: Any) -> "OtherGpu":
        return cls(settings.scenario("other_gpu") or "index")

    def goes_on(self, rec: RecordLike) -> bool:
        """The fresh compile runs only where the warm run loaded graph entries."""
        r = PhaseRecord.from_json(rec)
        return r.phase != "warm" or loaded_entries(r) > 0

    def judge(self, nodeid: str, recs: Records, snaps: Snapshots,
              timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        phases = phase_records(recs)
        res = super().judge(nodeid, phases, snaps, timings, triton_dir)
        if "fresh" not in phases:
            return res
        cold, warm, fresh = phases["cold"], phases["warm"], phases["fresh"]
        where = _gpu(warm)
        cmp = fresh_reference(res, fresh, f"the fresh compile on {where}")
        if cmp is not None and not cmp.ok:
            first = cmp.mismatches[0]
            res.problems.append(
                f"outputs: the warm run on {where}, which loaded {loaded_entries(warm)} "
                f"entr(ies) built on {_gpu(cold)}, differs from a fresh compile on {where} in "
                f"{len(cmp.mismatches)} tensor(s); first {first.name}: {first.message} - an "
                f"entry built on another GPU returns other numbers there: a key blind to the "
                f"device (pytorch#188390); give each GPU its own cache dir, or keep the "
                f"device index in the key (both GPUs visible)")
        elif cmp is not None:
            demoted = [p for p in res.problems if p.startswith(_WARM_VS_COLD)]
            res.problems = [p for p in res.problems if p not in demoted]
            res.notes += [f"{p[len('outputs: '):]} (information: the warm run ran on another "
                          f"GPU; a fresh compile there agrees with it)" for p in demoted]
            res.notes.append(f"the warm run on {where} loaded {loaded_entries(warm)} entr(ies) "
                             f"built on {_gpu(cold)} and computed what a fresh compile on "
                             f"{where} does ({cmp.mode})")
        return res.finalize()


def loaded_entries(rec: PhaseRecord) -> int:
    """The FX-graph and AOTAutograd entries a phase loaded (hits)."""
    return sum(1 for events in rec.cache.graphs.values()
               for layer in ("fx_graph", "aot_autograd") for e in events.entries(layer)
               if e.state == "hit")


def _gpu(rec: PhaseRecord) -> str:
    """A phase's GPU as the report names it: the machine's GPU, and how the phase saw it."""
    seen = f"cuda:{rec.cuda_index}" if rec.cuda_index is not None else (rec.device or "?")
    visible = [v.strip() for v in (rec.cuda_visible or "").split(",") if v.strip()]
    said = [x for x in (seen if len(visible) > (rec.cuda_index or 0) else "",
                        rec.device_name or "") if x]
    if rec.cuda_index is not None and rec.cuda_index < len(visible):
        return f"GPU {visible[rec.cuda_index]} ({', '.join(said)})"
    return f"{seen} ({rec.device_name})" if rec.device_name else seen
