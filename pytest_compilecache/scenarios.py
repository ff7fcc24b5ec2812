"""What a check runs: which phase processes, with which cache state between them, and
which rule judges their records. One Scenario per kind, picked from a registry (the way
pytest-xdist picks a scheduler), so a new way to reach a warm start (a portable cache, a
compiled artifact) arrives as a new class here, not as another flag in the session.

pytest-free: the session runs the phases a scenario plans, in one private cache root,
and hands the records back to it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Type

from pytest_compilecache import files as fs
from pytest_compilecache.verdict import CheckResult, judge, recorded

Records = Dict[str, Dict[str, Any]]     # phase name -> what its child recorded
Snapshots = Dict[str, fs.Snapshot]      # phase name -> the cache root's files after it


@dataclass(frozen=True)
class PhasePlan:
    name: str                  # the child's phase: its spec, log and record files
    at_baseline: bool = False  # run in the baseline's worktree (another commit's code)
    fresh_root: bool = False   # a new, empty cache root at another path: the artifact
    #                            travels, the directories don't
    artifact: Optional[str] = None  # "save" after the workload, or "load" before it


class Scenario:
    """A plan of phases and the rule that judges them."""
    name = ""
    via = "local"  # the warm-start path the result is reported under
    phases: Tuple[PhasePlan, ...] = ()
    # the first phase's keys go to the manifest store, the repeat run and the baseline
    # comparison (not when that phase ran another commit's code)
    records_keys = True

    def judge(self, nodeid: str, recs: Records, snaps: Snapshots,
              timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        raise NotImplementedError


class LocalRestart(Scenario):
    """The same machine restarts over the same cache directories: cold, then warm."""
    name = "local"
    phases = (PhasePlan("cold"), PhasePlan("warm"))
    cold_is_other_code = False

    def judge(self, nodeid: str, recs: Records, snaps: Snapshots,
              timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        return judge(nodeid, recs["cold"], recs["warm"], snaps["cold"],
                     fs.added(snaps["cold"], snaps["warm"]), timings, triton_dir,
                     cold_is_other_code=self.cold_is_other_code)


class Deploy(LocalRestart):
    """The caches a baseline commit built, deployed under this commit's code: the cold
    phase runs in the baseline's worktree, so its numbers may legitimately differ."""
    name = "deploy"
    phases = (PhasePlan("cold", at_baseline=True), PhasePlan("warm"))
    records_keys = False
    cold_is_other_code = True


class RecordKeys(Scenario):
    """Cold only, to record the key manifest (baselines, bisect): no verdict."""
    name = "record"
    phases = (PhasePlan("cold"),)

    def judge(self, nodeid: str, recs: Records, snaps: Snapshots,
              timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        return recorded(nodeid, recs["cold"], timings)


class MegaCache(Scenario):
    """The portable mega-cache: the cold process compiles, runs and saves
    `torch.compiler.save_cache_artifacts()`; the warm process starts on an empty cache
    root elsewhere, loads those bytes, and runs. Whatever it still builds is what the
    artifact did not carry (compiled C++ objects are not in it: pytorch#172542)."""
    name = via = "mega"
    phases = (PhasePlan("cold", artifact="save"),
              PhasePlan("warm", fresh_root=True, artifact="load"))
    records_keys = False  # the local path's cold run records them

    def judge(self, nodeid: str, recs: Records, snaps: Snapshots,
              timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        cold_art = recs["cold"].get("artifact") or {}
        warm_art = recs["warm"].get("artifact") or {}
        loaded = warm_art.get("files") or {}
        # after the load, what the run built; an FX graph hit writes its output code (.py)
        # into the new root, which the local restart found in place: that is no rebuild
        warm_new = [p for p in fs.added(loaded, snaps["warm"])
                    if not (fs.layer_of(p) == "fx_graph" and p.endswith(".py"))]
        res = judge(nodeid, recs["cold"], recs["warm"], snaps["cold"], warm_new, timings,
                    triton_dir)
        res.via = self.via
        missing = cold_art.get("error") or warm_art.get("error")
        if missing:
            res.verdict = "fail"
            res.problems.insert(0, f"mega-cache: {missing}")
            return res
        built = fs.by_layer(warm_new)
        carried = ", ".join(f"{k} {n}" for k, n in sorted((cold_art.get("counts") or {}).items()))
        res.notes.append(f"mega-cache: {cold_art.get('bytes', 0)} bytes saved "
                         f"({carried or 'no artifacts'}), {len(loaded)} file(s) in place "
                         f"after the load")
        kernels = built.get("kernels") or []
        if kernels:
            objects = [p for p in kernels if p.endswith(".so")]
            lv = res.layers.get("kernels")
            why = (f"the warm process rebuilt {len(objects)} C++ kernel object(s) and "
                   f"{len(kernels) - len(objects)} other kernel file(s) that the mega-cache "
                   f"did not carry (torch.compiler.save_cache_artifacts keeps no compiled "
                   f".so objects, pytorch#172542, #155332): "
                   + ", ".join(p.rsplit("/", 1)[-1] for p in (objects or kernels)[:5]))
            if lv is not None:
                lv.state = "miss"
                lv.reasons.insert(0, why)
            res.problems = [p for p in res.problems if not p.startswith("kernels:")]
            res.problems.append(f"kernels: miss - {why}")
            res.verdict = "fail"
        return res


REGISTRY: Dict[str, Type[Scenario]] = {
    s.name: s for s in (LocalRestart, Deploy, RecordKeys, MegaCache)}


def for_settings(settings: Any) -> List[Scenario]:
    """The scenarios the options ask for: the local restart (or deploy, or recording),
    then each further warm-start path of --compile-cache-via."""
    if settings.manifest_only:
        return [REGISTRY["record"]()]
    if settings.baseline_warm:
        return [REGISTRY["deploy"]()]
    return [REGISTRY["local"]()] + [REGISTRY[v]() for v in settings.via if v != "local"]
