"""Caching precompile (--compile-cache-via=precompile): the mega-cache with
TORCH_CACHING_PRECOMPILE=1 in both processes, which also carries Dynamo's compiled frames,
so the warm process must not trace."""
from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

from pytest_compilecache.layers.base import Carrier
from pytest_compilecache.model import CheckResult
from pytest_compilecache.wire import PhaseRecord, RecordLike
from pytest_compilecache.paths.base import Info, PhasePlan, Phases, Snapshots, last_exception
from pytest_compilecache.paths.mega import MegaCache

# torch's own words when caching precompile drops a guard, bypasses a frame, or cannot
# load an entry (torch/_dynamo/guards.py, output_graph.py, eval_frame.py)
_PRECOMPILE_WORDS = ("caching_precompile", "package bypass", "dynamo cache",
                     "cannot be saved into torch.compile() package")


class CachingPrecompile(MegaCache):
    """Caching precompile: the mega-cache with TORCH_CACHING_PRECOMPILE=1 in both
    processes also carries Dynamo's compiled frames, so the warm process must not trace."""
    name = via = "precompile"
    summary = "precompile (the same with TORCH_CACHING_PRECOMPILE=1, 2.9+)"
    loader = "load_cache_artifacts"
    env = (("TORCH_CACHING_PRECOMPILE", "1"),)
    phases = (PhasePlan("cold", artifact="save", env=env),
              PhasePlan("warm", fresh_root=True, artifact="load", env=env))
    carrier = Carrier("the caching-precompile artifact",
                      "it is a mega-cache, which keeps no compiled .so objects")

    def failed(self, phase: str, rec: RecordLike, result: CheckResult) -> CheckResult:
        """The workload crashed with caching precompile on, and only then (the local
        path runs it without): a path that fails, with torch's reason."""
        r = PhaseRecord.from_json(rec)
        if r.ran or not r.error or r.internal_step:
            return super().failed(phase, r, result)
        said = [x for x in r.artifact.torch_said if "dropped" not in x]
        result.error_fails, result.error = True, None  # the path fails (finalize)
        result.problems = [f"precompile: the {phase} workload fails with caching precompile "
                           f"on (TORCH_CACHING_PRECOMPILE=1), which the local path runs "
                           f"without: {last_exception(r.error)}"
                           + (f"; torch said: {said[-1]}" if said else "")]
        return result.finalize()

    def rule(self, nodeid: str, recs: Phases, snaps: Snapshots, warm_new: List[str],
             timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        res = super().rule(nodeid, recs, snaps, warm_new, timings, triton_dir)
        cold_said, warm_said = recs["cold"].artifact.torch_said, recs["warm"].artifact.torch_said
        wc = recs["warm"].cache
        hits = wc.counter("dynamo_cache", "dynamo_cache_hit")
        traced = wc.counter("frames", "total")
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
        return res  # its problems become the verdict in ArtifactPath.judge

    since = "2.9"

    def not_applicable(self, form: str, case: Any) -> Optional[str]:
        import torch

        if not hasattr(torch._dynamo.config, "caching_precompile"):
            return f"torch {torch.__version__} has no caching precompile (torch {self.since}+)"
        return super().not_applicable(form, case)

    @contextlib.contextmanager
    def watching(self, info: Info, device: str) -> Iterator[None]:
        said: List[str] = info.setdefault("torch_said", [])
        handler = _Collect(said)
        logger = logging.getLogger("torch._dynamo")
        logger.addHandler(handler)
        try:
            yield
        finally:
            logger.removeHandler(handler)


class _Collect(logging.Handler):
    def __init__(self, into: List[str]) -> None:
        super().__init__(logging.WARNING)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:
            return
        if any(w in text for w in _PRECOMPILE_WORDS) and text not in self.into:
            self.into.append(text[:500])
