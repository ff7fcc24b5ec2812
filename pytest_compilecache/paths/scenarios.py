"""What a check runs: which phase processes, with which cache state between them, and
which rule judges their records. One Scenario per kind, picked from a registry (the way
pytest-xdist picks a scheduler), so a new way to reach a warm start (a portable cache, a
compiled artifact) arrives as a new class here, not as another flag in the session.

pytest-free: the session runs the phases a scenario plans, in one private cache root,
and hands the records back to it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Type

from pytest_compilecache import files as fs
from pytest_compilecache.judge.verdict import (Carrier, CheckResult, autotune_benchmarks, counter, judge,
                                         judge_loaded, recorded)

Records = Dict[str, Dict[str, Any]]     # phase name -> what its child recorded
Snapshots = Dict[str, fs.Snapshot]      # phase name -> the cache root's files after it


@dataclass(frozen=True)
class PhasePlan:
    name: str                  # the child's phase: its spec, log and record files
    at_baseline: bool = False  # run in the baseline's worktree (another commit's code)
    fresh_root: bool = False   # a new, empty cache root at another path: the artifact
    #                            travels, the directories don't
    artifact: Optional[str] = None  # "save" after the workload, or "load" before it
    env: Tuple[Tuple[str, str], ...] = ()  # set in the phase's environment
    keeps_outputs: bool = False  # saves its compiled outputs for a later phase
    compare_with: Optional[str] = None  # compares its outputs with this phase's, not cold's


class Scenario:
    """A plan of phases and the rule that judges them."""
    name = ""
    via = "local"  # the warm-start path the result is reported under
    phases: Tuple[PhasePlan, ...] = ()
    # the first phase's keys go to the manifest store, the repeat run and the baseline
    # comparison (not when that phase ran another commit's code)
    records_keys = True
    artifact_file = "artifact.bin"  # what a phase saves for the next, in phases/

    def judge(self, nodeid: str, recs: Records, snaps: Snapshots,
              timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        raise NotImplementedError

    @classmethod
    def from_settings(cls, settings: Any) -> "Scenario":
        return cls()

    def phase_env(self, plan: PhasePlan) -> Dict[str, str]:
        """What this path sets in a phase's environment (before the phase runs)."""
        return dict(plan.env)

    def close(self) -> None:
        """The session ends: stop what this scenario started."""

    def goes_on(self, rec: Dict[str, Any]) -> bool:
        """After a phase that ran: whether the next phase runs."""
        return True

    def failed(self, phase: str, rec: Dict[str, Any], result: CheckResult) -> CheckResult:
        """A phase failed (`result` is its error): the path may say what that means."""
        return result


class LocalRestart(Scenario):
    """The same machine restarts over the same cache directories: cold, then warm."""
    name = "local"
    phases: Tuple[PhasePlan, ...] = (PhasePlan("cold"), PhasePlan("warm"))
    cold_is_other_code = False

    def judge(self, nodeid: str, recs: Records, snaps: Snapshots,
              timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        return judge(nodeid, recs["cold"], recs["warm"], snaps["cold"],
                     fs.added(snaps["cold"], snaps["warm"]), timings, triton_dir,
                     cold_is_other_code=self.cold_is_other_code)


class Deploy(LocalRestart):
    """The caches a baseline commit built, deployed under this commit's code: the cold
    phase runs in the baseline's worktree, so its numbers may legitimately differ, and
    a stale entry shows as warm compiled vs eager of this commit. Eager cannot judge a
    tensor that changes with the random seed (dropout): for those, and only when there
    are some, a third phase compiles this commit's code afresh on an empty cache, and
    the warm run must draw and compute what it does."""
    name = "deploy"
    phases = (PhasePlan("cold", at_baseline=True), PhasePlan("warm", keeps_outputs=True),
              PhasePlan("fresh", fresh_root=True, compare_with="warm"))
    records_keys = False
    cold_is_other_code = True

    def goes_on(self, rec: Dict[str, Any]) -> bool:
        return rec.get("phase") != "warm" or bool(random_tensors(rec))

    def judge(self, nodeid: str, recs: Records, snaps: Snapshots,
              timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        res = super().judge(nodeid, recs, snaps, timings, triton_dir)
        if "fresh" not in recs:
            return res
        cmp = recs["fresh"].get("compare_cold") or {}
        res.outputs["fresh_vs_warm"] = cmp
        n = len(random_tensors(recs["warm"]))
        if not cmp:
            res.problems.append("outputs: the fresh compile of this commit's code made no "
                                "comparison with the warm run")
        elif not cmp.get("ok"):
            first = cmp["mismatches"][0]
            res.problems.append(
                f"outputs: the warm run (the baseline's caches under this commit's code) differs "
                f"from a fresh compile of this commit's code in {len(cmp['mismatches'])} "
                f"tensor(s); first {first['name']}: {first.get('message', '')} - a stale cache "
                f"entry returns the baseline's numbers (a fresh head compile is the reference "
                f"here because {n} tensor(s) change with the random seed and eager cannot "
                f"judge them)")
        else:
            res.notes.append(f"{n} tensor(s) change with the random seed, which eager cannot "
                             f"judge: a fresh compile of this commit's code on an empty cache "
                             f"(an extra phase, run only for them) drew and computed what the "
                             f"warm run did ({cmp.get('mode')})")
        if res.problems:
            res.verdict = "fail"
        return res


def random_tensors(rec: Dict[str, Any]) -> List[str]:
    """The tensors a phase found to change with the random seed (`randomness`)."""
    return [r["name"] for r in (rec.get("compare_eager") or {}).get("random") or []]


class RecordKeys(Scenario):
    """Cold only, to record the key manifest (baselines, bisect): no verdict."""
    name = "record"
    phases = (PhasePlan("cold"),)

    def judge(self, nodeid: str, recs: Records, snaps: Snapshots,
              timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        return recorded(nodeid, recs["cold"], timings)


class ArtifactPath(Scenario):
    """A warm start from an artifact that travels: the cold process compiles, runs and
    saves it; the warm process starts on an empty cache root elsewhere, loads it, and
    runs. Whatever the warm process still builds is what the artifact did not carry."""
    phases = (PhasePlan("cold", artifact="save"),
              PhasePlan("warm", fresh_root=True, artifact="load"))
    records_keys = False  # the local path's cold run records them
    carrier = Carrier("the artifact")  # named in the reason of a rebuilt kernel

    loader = ""  # the torch call that loads the artifact, as a traceback names it

    def goes_on(self, rec: Dict[str, Any]) -> bool:
        """After a phase: no warm phase once the path is n/a or its artifact failed."""
        art = rec.get("artifact") or {}
        return not (art.get("na") or art.get("error"))

    def failed(self, phase: str, rec: Dict[str, Any], result: CheckResult) -> CheckResult:
        """A warm process that crashed inside torch's loader: the artifact cannot be
        loaded on this machine, which is this path failing, not the plugin or the model."""
        if phase == "warm" and self.loader and self.loader in (result.error or ""):
            first = (result.error or "").splitlines()[0]
            result.verdict = "fail"
            result.problems.insert(0, f"{self.via}: the warm process died inside torch's "
                                      f"{self.loader} ({first}): the artifact the cold "
                                      f"process built cannot be loaded here")
        return result

    def judge(self, nodeid: str, recs: Records, snaps: Snapshots,
              timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        cold_art = recs["cold"].get("artifact") or {}
        warm_art = (recs.get("warm") or {}).get("artifact") or {}
        if cold_art.get("na"):
            return CheckResult(nodeid=nodeid, verdict="n/a", via=self.via,
                               versions=recs["cold"].get("versions") or {},
                               device=recs["cold"].get("device"), timings=timings,
                               notes=[f"{self.via}: {cold_art['na']}"])
        missing = cold_art.get("error") or warm_art.get("error")
        if missing or "warm" not in recs:
            return CheckResult(nodeid=nodeid, verdict="fail", via=self.via,
                               versions=recs["cold"].get("versions") or {},
                               device=recs["cold"].get("device"), timings=timings,
                               problems=[f"{self.via}: {missing or 'the warm phase did not run'}"])
        loaded = warm_art.get("files") or {}
        warm_new = [p for p in fs.added(loaded, snaps["warm"])
                    # an FX graph hit writes its output code (.py) into the new root, which
                    # the local restart found in place: that is no rebuild
                    if not (fs.layer_of(p) == "fx_graph" and p.endswith(".py"))]
        probes = fs.cpu_capability_probes(warm_art.get("watched") or {}, warm_new)
        warm_new = [p for p in warm_new if p not in probes]
        unpacked = self._unpacked_triton(recs["warm"], warm_new)
        tuned = self._restored_autotune(recs["warm"], warm_new)
        warm_new = [p for p in warm_new if p not in unpacked and p not in tuned]
        res = self.rule(nodeid, recs, snaps, warm_new, timings, triton_dir)
        res.via = self.via
        res.timings["warm_load_s"] = warm_art.get("load_s")
        if probes:
            res.notes.append(f"the warm process rebuilt {len(probes)} file(s) of torch's CPU "
                             f"capability probes (VecISA checks, once per empty cache "
                             f"directory, not the model's kernels)")
        if unpacked:
            helpers = [p for p in unpacked if p.endswith(".so")]
            res.notes.append(f"Triton compiled no kernel in the warm process; it wrote "
                             f"{len(unpacked) - len(helpers)} kernel file(s) unpacked from the "
                             f"artifact into its empty cache, and built {len(helpers)} driver "
                             f"stub(s) (cuda_utils, __triton_launcher: C, per kernel signature, "
                             f"in no artifact)")
        if tuned:
            res.notes.append(f"{len(tuned)} autotune result(s) (.best_config) written into the "
                             f"empty cache from the artifact; the warm process benchmarked "
                             f"nothing")
        res.notes.append(self.carried(cold_art, loaded))
        if cold_art.get("cold_ran") == "eager":
            res.notes.append(f"{self.via}: the cold process built the artifact and ran the "
                             f"model eagerly; only the warm process loads it, so warm vs cold "
                             f"compares it with eager")
        if cold_art.get("ignored_options"):
            res.notes.append(f"{self.via}: compile options it does not take were left out: "
                             + ", ".join(cold_art["ignored_options"]))
        return res

    @staticmethod
    def _unpacked_triton(warm: Dict[str, Any], warm_new: List[str]) -> List[str]:
        """Files in the Triton cache that no Triton compile wrote: the FX entries bundle
        their kernels, and a load writes them out. Only when Triton's compile listener
        ran and counted no compile; without it every such file stays suspect."""
        kernels = (warm.get("cache") or {}).get("kernels") or {}
        if not kernels.get("triton_listener") or kernels.get("triton_compiled"):
            return []
        return [p for p in warm_new if p.startswith("triton/")]

    @staticmethod
    def _restored_autotune(warm: Dict[str, Any], warm_new: List[str]) -> List[str]:
        """Autotune results a hit wrote out (a remote bundle, say) while no benchmark ran."""
        if autotune_benchmarks(warm.get("cache") or {}):
            return []
        return [p for p in warm_new if fs.layer_of(p) == "autotune"]

    def rule(self, nodeid: str, recs: Records, snaps: Snapshots, warm_new: List[str],
             timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        """The cache layers as for a local restart: what the artifact filled must hit."""
        return judge(nodeid, recs["cold"], recs["warm"], snaps["cold"], warm_new, timings,
                     triton_dir, carrier=self.carrier)

    def carried(self, cold_art: Dict[str, Any], loaded: fs.Snapshot) -> str:
        what = ", ".join(f"{k} {n}" for k, n in sorted((cold_art.get("counts") or {}).items()))
        return (f"{self.via}: {cold_art.get('bytes', 0)} bytes saved ({what or 'no artifacts'}), "
                f"{len(loaded)} file(s) in place after the load")


class MegaCache(ArtifactPath):
    """torch.compiler.save_cache_artifacts() bytes (torch 2.7+)."""
    name = via = "mega"
    loader = "load_cache_artifacts"
    carrier = Carrier("the mega-cache", "torch.compiler.save_cache_artifacts keeps no compiled "
                                        ".so objects: pytorch#172542, #155332")


class CachingPrecompile(ArtifactPath):
    """Caching precompile: the mega-cache with TORCH_CACHING_PRECOMPILE=1 in both
    processes also carries Dynamo's compiled frames, so the warm process must not trace."""
    name = via = "precompile"
    loader = "load_cache_artifacts"
    env = (("TORCH_CACHING_PRECOMPILE", "1"),)
    phases = (PhasePlan("cold", artifact="save", env=env),
              PhasePlan("warm", fresh_root=True, artifact="load", env=env))
    carrier = Carrier("the caching-precompile artifact",
                      "it is a mega-cache, which keeps no compiled .so objects")

    def failed(self, phase: str, rec: Dict[str, Any], result: CheckResult) -> CheckResult:
        """The workload crashed with caching precompile on, and only then (the local
        path runs it without): a path that fails, with torch's reason."""
        if rec.get("ran") or not rec.get("error") or rec.get("internal_step"):
            return super().failed(phase, rec, result)
        said = [x for x in (rec.get("artifact") or {}).get("torch_said") or []
                if "dropped" not in x]
        result.verdict, result.error = "fail", None
        result.problems = [f"precompile: the {phase} workload fails with caching precompile "
                           f"on (TORCH_CACHING_PRECOMPILE=1), which the local path runs "
                           f"without: {last_exception(rec['error'])}"
                           + (f"; torch said: {said[-1]}" if said else "")]
        return result

    def rule(self, nodeid: str, recs: Records, snaps: Snapshots, warm_new: List[str],
             timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        res = super().rule(nodeid, recs, snaps, warm_new, timings, triton_dir)
        cold_said = (recs["cold"].get("artifact") or {}).get("torch_said") or []
        warm_said = (recs["warm"].get("artifact") or {}).get("torch_said") or []
        wc = recs["warm"].get("cache") or {}
        hits = counter(wc, "dynamo_cache", "dynamo_cache_hit")
        traced = counter(wc, "frames", "total")
        if not hits or traced:
            why = [x for x in cold_said + warm_said if "dropped" not in x] or [
                "torch logged no reason (is the compiled function the same code object in "
                "both processes?)"]
            res.problems.insert(0, f"precompile: the warm process traced {traced} frame(s) "
                                   f"with Dynamo and loaded {hits} precompiled one(s): "
                                   f"{'; '.join(why[:3])}")
        dropped = [x for x in cold_said if "dropped" in x]
        if dropped:
            res.notes.append(f"precompile: {len(dropped)} guard(s) dropped, so a process "
                             f"that differs there still loads this entry: "
                             + "; ".join(dropped[:4]))
        if res.problems:
            res.verdict = "fail"
        return res


def last_exception(traceback_text: str) -> str:
    """The final exception of a formatted traceback, its message on one line."""
    lines = traceback_text.rstrip().splitlines()
    start = max((i for i, x in enumerate(lines) if _EXC_LINE.match(x)), default=len(lines) - 1)
    return " ".join(x.strip() for x in lines[start:] if x.strip())[:700]


_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*: ")


class RemoteCaches(ArtifactPath):
    """torch's Redis remote caches: the cold process (empty local root) writes through to
    the server; the warm process, on another empty local root, must hit every layer that
    has a remote cache through it. A private server is started on first use and emptied
    before each check's cold run; a user's own server (--compile-cache-redis) is neither."""
    name = via = "remote"
    carrier = Carrier("the Redis server", "torch's remote caches hold FX graphs, AOTAutograd "
                                          "entries, autotune results and PGO profiles, not "
                                          "compiled kernels outside an FX entry's bundle")
    # torch's remote cache classes (torch/_inductor/remote_cache.py) and their layers
    LAYER_OF = {"RemoteFxGraphCache": "fx_graph", "RemoteAOTAutogradCache": "aot_autograd",
                "RemoteAutotuneCache": "autotune", "RemoteBundledAutotuneCache": "autotune",
                "RemoteDynamoPGOCache": "dynamo_pgo"}
    # the autotune ones are switched on in the child, on CUDA only (warmstart.py)
    ENV = {"TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1", "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE": "1",
           "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_REMOTE_PGO": "1"}

    def __init__(self, address: Optional[str] = None) -> None:
        self.address = address
        self.server: Any = None

    @classmethod
    def from_settings(cls, settings: Any) -> "Scenario":
        return cls(getattr(settings, "redis", None))

    def phase_env(self, plan: PhasePlan) -> Dict[str, str]:
        from pytest_compilecache.paths.redis_server import RedisServer

        if self.server is None:
            self.server = (RedisServer.users(self.address) if self.address
                           else RedisServer.start())
        if plan.name == "cold":
            self.server.flush()  # a private server: nobody's entries warm this cold run
        return {**self.ENV, **self.server.env()}

    def close(self) -> None:
        if self.server is not None:
            self.server.close()

    def failed(self, phase: str, rec: Dict[str, Any], result: CheckResult) -> CheckResult:
        result = super().failed(phase, rec, result)
        if "was not cold" in (result.error or "") and self.server is not None \
                and not self.server.owned:
            result.error = (result.error or "") + (
                f"; here the likely source is your Redis server at {self.address}: it holds "
                f"entries of earlier runs (the check empties only a server of its own: leave "
                f"--compile-cache-redis out)")
        return result

    def carried(self, cold_art: Dict[str, Any], loaded: fs.Snapshot) -> str:
        puts = ", ".join(f"{n} {v.get('put', 0)}" for n, v in (cold_art.get("remote") or {}).items()
                         if v.get("put") and n in self.LAYER_OF)
        where = (f"a private redis-server at {self.server.address}" if self.server is not None
                 and self.server.owned else f"your Redis server at {self.address} (its "
                 f"existing entries may have warmed the cold run)")
        return f"remote: {where}; the cold process put {puts or 'nothing'}"

    def rule(self, nodeid: str, recs: Records, snaps: Snapshots, warm_new: List[str],
             timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        res = super().rule(nodeid, recs, snaps, warm_new, timings, triton_dir)
        cold_r = (recs["cold"].get("artifact") or {}).get("remote") or {}
        warm_r = (recs["warm"].get("artifact") or {}).get("remote") or {}
        for name in sorted(set(cold_r) | set(warm_r)):
            if name not in self.LAYER_OF:  # torch's in-process and backend tallies
                continue
            c, w = cold_r.get(name) or {}, warm_r.get(name) or {}
            layer = self.LAYER_OF[name]
            local = warm_r.get(name.replace("Remote", "Local", 1)) or {}
            res.notes.append(f"remote {layer} ({name}): cold put {c.get('put', 0)}; warm hit "
                             f"{w.get('hit', 0)}, miss {w.get('miss', 0)} (its empty local "
                             f"disk: miss {local.get('miss', 0)})")
            if w.get("exception") or c.get("exception"):
                res.problems.append(f"remote {layer}: {name} raised {c.get('exception', 0)} "
                                    f"exception(s) cold and {w.get('exception', 0)} warm")
            elif c.get("put") and w.get("miss") and not w.get("hit"):
                res.problems.append(f"remote {layer}: the warm process missed {name} "
                                    f"{w['miss']} time(s) and hit it never, though the cold "
                                    f"one put {c['put']} entr(ies)")
            elif w.get("miss") and not c.get("put"):
                res.problems.append(f"remote {layer}: the warm process missed {name} "
                                    f"{w['miss']} time(s): the server holds nothing the cold "
                                    f"process put there")
        if self.server is not None and self.server.keys() is None:
            res.problems.insert(0, f"remote: the Redis server at {self.server.address} did "
                                   f"not answer after the warm phase: the remote caches were "
                                   f"unreachable")
        if res.problems:
            res.verdict = "fail"
        return res


class _Loaded(ArtifactPath):
    """The artifact replaces torch.compile in the warm process: nothing may compile."""

    def rule(self, nodeid: str, recs: Records, snaps: Snapshots, warm_new: List[str],
             timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        return judge_loaded(nodeid, recs["cold"], recs["warm"], warm_new, timings,
                            self.carrier)


class AOTCompiled(_Loaded):
    """torch.compile(fullgraph=True).aot_compile, save_compiled_function,
    torch.compiler.load_compiled_function."""
    name = via = "aot"
    loader = "load_compiled_function"
    carrier = Carrier("the saved compiled function",
                      "it holds Inductor's output code, whose C++ kernels are compiled on load")


class AOTInductor(_Loaded):
    """torch.export + aoti_compile_and_package, aoti_load_package."""
    name = via = "aoti"
    loader = "aoti_load_package"
    carrier = Carrier("the AOTInductor package")
    artifact_file = "artifact.pt2"  # aoti_compile_and_package wants the suffix


REGISTRY: Dict[str, Type[Scenario]] = {
    s.name: s for s in (LocalRestart, Deploy, RecordKeys, MegaCache, CachingPrecompile,
                         AOTCompiled, AOTInductor, RemoteCaches)}


def for_settings(settings: Any) -> List[Scenario]:
    """The scenarios the options ask for: recording, the deploy scenario, or each
    warm-start path of --compile-cache-via (default: the local restart alone)."""
    if settings.manifest_only:
        return [REGISTRY["record"].from_settings(settings)]
    if settings.baseline_warm:
        return [REGISTRY["deploy"].from_settings(settings)]
    return [REGISTRY[v].from_settings(settings) for v in settings.via]
