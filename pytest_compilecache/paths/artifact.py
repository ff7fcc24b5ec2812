"""What the paths that carry an artifact share (mega, precompile, remote, aot, aoti): the
cold process compiles, runs and saves it; the warm process starts on an empty cache root
elsewhere, loads it, and runs. The rule: whatever the warm process still builds is what
the artifact did not carry."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Set

from pytest_compilecache import files as fs
from pytest_compilecache import layers
from pytest_compilecache.judge.verdict import judge, judge_loaded
from pytest_compilecache.layers.base import Carrier
from pytest_compilecache.model import CheckResult
from pytest_compilecache.wire import ArtifactRecord, PhaseRecord, RecordLike, phase_records
from pytest_compilecache.paths.base import PhasePlan, Phases, Records, Snapshots, WarmStartPath


class ArtifactPath(WarmStartPath):
    """A warm start from an artifact that travels: the cold process compiles, runs and
    saves it; the warm process starts on an empty cache root elsewhere, loads it, and
    runs. Whatever the warm process still builds is what the artifact did not carry."""
    phases = (PhasePlan("cold", artifact="save"),
              PhasePlan("warm", fresh_root=True, artifact="load"))
    records_keys = False  # the local path's cold run records them
    carrier = Carrier("the artifact")  # named in the reason of a rebuilt kernel

    loader = ""  # the torch call that loads the artifact, as a traceback names it

    def goes_on(self, rec: RecordLike) -> bool:
        """After a phase: no warm phase once the path is n/a or its artifact failed."""
        art = PhaseRecord.from_json(rec).artifact
        return not (art.na or art.error)

    def failed(self, phase: str, rec: RecordLike, result: CheckResult) -> CheckResult:
        """A warm process that crashed inside torch's loader: the artifact cannot be
        loaded on this machine, which is this path failing, not the plugin or the model."""
        if phase == "warm" and self.loader and self.loader in (result.error or ""):
            first = _exception_line(result.error or "")
            result.error_fails = True
            result.problems.insert(0, f"{self.via}: the warm process died inside torch's "
                                      f"{self.loader} ({first}): the artifact the cold "
                                      f"process built cannot be loaded here")
        return result.finalize()

    def judge(self, nodeid: str, recs: Records, snaps: Snapshots,
              timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        phases = phase_records(recs)
        cold = phases["cold"]
        cold_art = cold.artifact
        warm_art = phases["warm"].artifact if "warm" in phases else ArtifactRecord()
        if cold_art.na:
            return CheckResult(nodeid=nodeid, verdict="n/a", via=self.via,
                               versions=cold.versions, device=cold.device, timings=timings,
                               notes=[f"{self.via}: {cold_art.na}"])
        missing = cold_art.error or warm_art.error
        if missing or "warm" not in phases:
            return CheckResult(nodeid=nodeid, verdict="pass", via=self.via,
                               versions=cold.versions, device=cold.device, timings=timings,
                               problems=[f"{self.via}: {missing or 'the warm phase did not run'}"]
                               ).finalize()
        loaded = warm_art.files
        warm_new = [p for p in fs.added(loaded, snaps["warm"])
                    # an FX graph hit writes its output code (.py) into the new root, which
                    # the local restart found in place: that is no rebuild
                    if not (layers.layer_of(p) == "fx_graph" and p.endswith(".py"))]
        probes = fs.cpu_capability_probes(warm_art.watched, warm_new)
        warm_new = [p for p in warm_new if p not in probes]
        # what each layer says the load wrote out (Triton's bundled kernels, say): no rebuild
        by_layer = layers.by_layer(warm_new)
        unpacked = [layer.unpacked(phases["warm"].cache, by_layer.get(layer.name, []))
                    for layer in layers.REGISTRY]
        restored = {p for files, _ in unpacked for p in files}
        warm_new = [p for p in warm_new if p not in restored]
        res = self.rule(nodeid, phases, snaps, warm_new, timings, triton_dir)
        res.via = self.via
        res.timings["warm_load_s"] = warm_art.load_s
        self._notes(res, cold_art, loaded, probes, [note for _, note in unpacked if note])
        return res.finalize()

    def _notes(self, res: CheckResult, cold_art: ArtifactRecord, loaded: fs.Snapshot,
               probes: Set[str], unpacked: List[str]) -> None:
        """What the warm process found in place or wrote that is no rebuild (`unpacked`:
        the layers' notes on it), and what the artifact carried."""
        if probes:
            res.notes.append(f"the warm process rebuilt {len(probes)} file(s) of torch's CPU "
                             f"capability probes (VecISA checks, once per empty cache "
                             f"directory, not the model's kernels)")
        res.notes += unpacked
        res.notes.append(self.carried(cold_art, loaded))
        if cold_art.cold_ran == "eager":
            res.notes.append(f"{self.via}: the cold process built the artifact and ran the "
                             f"model eagerly; only the warm process loads it, so warm vs cold "
                             f"compares it with eager")
        if cold_art.ignored_options:
            res.notes.append(f"{self.via}: compile options it does not take were left out: "
                             + ", ".join(cold_art.ignored_options))

    def rule(self, nodeid: str, recs: Phases, snaps: Snapshots, warm_new: List[str],
             timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        """The cache layers as for a local restart: what the artifact filled must hit.
        Its problems become the verdict in `judge`, after the path's own."""
        return judge(nodeid, recs["cold"], recs["warm"], snaps["cold"], warm_new, timings,
                     triton_dir, carrier=self.carrier)

    def carried(self, cold_art: ArtifactRecord, loaded: fs.Snapshot) -> str:
        what = ", ".join(f"{k} {n}" for k, n in sorted(cold_art.counts.items()))
        return (f"{self.via}: {cold_art.bytes} bytes saved ({what or 'no artifacts'}), "
                f"{len(loaded)} file(s) in place after the load")


class LoadedArtifactPath(ArtifactPath):
    """The artifact replaces torch.compile in the warm process: nothing may compile.
    Only a ModelCase says what the model and its inputs are."""

    def not_applicable(self, form: str, case: Any) -> Optional[str]:
        if form != "model_case":
            return (f"needs a ModelCase fixture (a test body has no single model and inputs "
                    f"to {self.name}-compile)")
        return None

    def rule(self, nodeid: str, recs: Phases, snaps: Snapshots, warm_new: List[str],
             timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        return judge_loaded(nodeid, recs["cold"], recs["warm"], warm_new, timings,
                            self.carrier)


def artifact_counts(cache_info: Any) -> Dict[str, int]:
    """Artifacts per kind in a torch CacheInfo (e.g. inductor_artifacts: 3)."""
    artifacts = getattr(cache_info, "artifacts", None) or {}
    return {str(k): len(v) for k, v in artifacts.items()}


def _exception_line(error: str) -> str:
    """What the loader raised: the error's last `SomeError: ...` line (its first line is
    the phase's own `warm phase failed:`), else its first line."""
    lines = [x.strip() for x in error.splitlines() if x.strip()]
    raised = [x for x in lines if re.match(r"^[\w.]+(Error|Exception|Exit|Interrupt)\b", x)]
    return (raised[-1] if raised else lines[0] if lines else "")[:300]
