"""Dynamo's PGO profile (automatic dynamic shapes): written by the cold run, read by the
warm one so that it compiles dynamic at once instead of recompiling. Its rule: the
profile cold wrote, whether warm read it, and whether it spared warm the recompiles cold
made; without a job id, what a restart pays for that. Pure: reads typed cache records."""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Dict, List, Optional, Tuple

from pytest_compilecache.layers.base import CacheLayer, LayerInputs, Switch, TorchConfigs
from pytest_compilecache.model import LayerVerdict
from pytest_compilecache.wire import CacheRecord, LayerConfig

# guards automatic dynamic (and so a saved PGO profile) turns into one dynamic graph
SHAPE_GUARDS = ("size mismatch", "stride mismatch")
LOCAL_PGO = Switch("dynamo", "automatic_dynamic_local_pgo", "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO")


class DynamoPGO(CacheLayer):
    name, short, short_md = "dynamo_pgo", "pgo", "PGO"
    observed = ("PGO state reads and writes per graph (torch._dynamo.pgo's get/put, "
                "counted in the child), Dynamo's compiles per frame and the job id")
    heads = ("dynamo",)
    switches = (LOCAL_PGO,)

    def config(self, torch: TorchConfigs) -> Optional[Dict[str, Any]]:
        on = getattr(torch.dynamo, "automatic_dynamic_local_pgo", None)
        if on is None:
            return {"enabled": False, "why": f"torch {torch.version} has no local PGO (2.6+)"}
        forced = torch.forced()
        if forced:
            return forced
        if on and torch.job_id is None:
            return {"enabled": False, "no_job_id": True,
                    "why": "no job id: PGO state is not persisted across restarts"}
        return torch.switched_off(LOCAL_PGO, "every restart compiles a varying shape static, "
                                  "then again dynamic") or torch.on()

    def judge(self, inputs: LayerInputs) -> Tuple[LayerVerdict, List[str]]:
        return pgo_layer(inputs.cold, inputs.warm, inputs.config), []


def pgo_layer(cc: CacheRecord, wc: CacheRecord, cfg: Optional[LayerConfig]) -> LayerVerdict:
    c, w = _io(cc), _io(wc)
    lv = LayerVerdict(state="hit", cold=f"written {c['written']}", warm=f"read {w['read']}")
    if cfg is not None and cfg.no_job_id:
        return _pgo_without_job_id(lv, wc, cc)
    if cfg is not None and not cfg.enabled:
        return LayerVerdict("off" if cfg.off else "n/a", lv.cold, lv.warm,
                            [cfg.why or "disabled"], setting=cfg.setting)
    if not c["written"] and not w["read"]:
        return LayerVerdict("n/a", lv.cold, lv.warm, ["no profile state was written"])
    if c["written"] and not w["read"]:
        return LayerVerdict("miss", lv.cold, lv.warm,
                            ["cold wrote PGO state but the warm run never read it "
                             "(TORCH_COMPILE_JOB_ID or cache_key_tag differ?)"])
    cold_n, warm_n = compiles_per_frame(cc), compiles_per_frame(wc)
    # a frame recompiled on guards no profile addresses (a value, an object) is the
    # recompile check's to report (recompiles.py), not PGO's
    warm_n = {f: n for f, n in warm_n.items() if _pgo_addresses(wc, f)}
    for frame, n in sorted(warm_n.items()):
        if n > 1 and n >= cold_n.get(frame, 0):
            lv.state = "miss"
            lv.reasons.append(
                f"frame {frame}: the profile was read yet warm recompiled it {n} times, as "
                f"cold did: the saved profile did not apply (its CodeId differs per process, "
                f"e.g. a closure on torch 2.12+ with Python <= 3.11)")
    if sum(warm_n.values()) > sum(cold_n.get(f, 0) for f in warm_n):
        lv.state = "miss"
        lv.reasons.append(f"warm compiled {sum(warm_n.values())} graphs, cold ended with "
                          f"{sum(cold_n.values())}")
    return lv


def _io(rec: CacheRecord) -> Dict[str, int]:
    """PGO state reads and writes over the phase's graphs."""
    n = {"read": 0, "written": 0}
    for g in rec.graphs.values():
        n["read"] += g.pgo.read
        n["written"] += g.pgo.written
    return n


def _pgo_addresses(rec: CacheRecord, frame: str) -> bool:
    """Did `frame` recompile on a shape guard (or for reasons unknown)?"""
    why = [r for r in rec.recompile_reasons if str(r).startswith(f"{frame}/")]
    return not why or any(g in r for r in why for g in SHAPE_GUARDS)


def _pgo_without_job_id(lv: LayerVerdict, wc: CacheRecord,
                        cc: Optional[CacheRecord] = None) -> LayerVerdict:
    """No job id: torch keeps no profile across restarts. That costs nothing unless
    the warm run recompiled a frame on a shape guard, as every restart then will."""
    lv.state, lv.reasons = "off", ["no job id: PGO state is not persisted across restarts"]
    again = {f: n for f, n in compiles_per_frame(wc).items() if n > 1}
    shape = [r for r in wc.recompile_reasons if any(g in r for g in SHAPE_GUARDS)]
    if not again:
        return lv
    frames = ", ".join(f"frame {f} compiled {n} times" for f, n in sorted(again.items()))
    if not shape:
        lv.reasons.append(f"the warm run recompiled ({frames}) on guards PGO does not "
                          f"address: " + "; ".join((wc.recompile_reasons or ["?"])[:2]))
        return lv
    lv.state = "miss"
    unstable = _unstable_code_ids(cc or CacheRecord(), wc)
    lead = (f"no job id, so no PGO state across restarts, and the warm run recompiled: "
            f"{frames} ({shape[0].strip()}). Every restart pays this static-then-dynamic "
            f"recompile. ")
    if unstable:
        lv.reasons = [lead + "A job id would not help: " + unstable_ids(unstable, wc)]
        return lv
    lv.reasons = [
        lead + "Set a job id that is stable per model in production "
        "(TORCH_COMPILE_JOB_ID=<id>, or torch.compiler.config.job_id = '<id>'); torch's "
        "docs: the id tells torch that two runs are the same workload and may share "
        "profiles, so never share one between different models or topologies"]
    return lv


# what a closure hash depends on (child/probe.closure_hash_inputs), why it moves per process
HASHED = {
    "address": "hash(None), which on Python <= 3.11 is None's memory address and moves with "
               "every process (address randomisation), PYTHONHASHSEED or not (Python 3.12+ "
               "hashes None as a constant)",
    "strings": "the hash of the closed-over function's code, whose names are strings, "
               "which Python hashes differently per process unless PYTHONHASHSEED is fixed",
}


def unstable_ids(unstable: List[str], wc: CacheRecord) -> str:
    """Why a code's profile id differs per process, from what torch hashes
    (torch._dynamo.pgo.CodeId.make: `hash()` over each closure cell's function code,
    None for any other value), and what the user can do: a torch wrapper's closure
    (wrap_inline's `inner`) is torch's, never the test's to move."""
    dyn = wc.dynamo
    shown = [f"torch's own wrapper {c} around {dyn.user_code[c]}" if c in dyn.user_code
             else c for c in unstable[:3]]
    inputs = sorted({k for c in unstable for k in dyn.hash_inputs.get(c, [])})
    why = "; ".join(HASHED[k] for k in inputs if k in HASHED)
    why = f": {why}" if why else ""
    ours = [c for c in unstable[:3] if c not in dyn.user_code]
    fixes = ["compile the varying dimension dynamic from the start instead "
             "(torch._dynamo.mark_dynamic(x, 0) on the input, or torch.compile(..., "
             "dynamic=True))"]
    if inputs == ["strings"]:
        fixes.append("fix PYTHONHASHSEED in every process that serves it")
    if ours:
        fixes.append(f"move {', '.join(ours)} out of the closure")
    return (f"the profile is filed under each code's id, and for {', '.join(shown)} that id "
            f"holds a hash of its closure that differs per process{why}; "
            f"so no saved "
            f"profile would apply. " + "; or ".join(fixes)[:1].upper()
            + "; or ".join(fixes)[1:])


def _unstable_code_ids(cc: CacheRecord, wc: CacheRecord) -> List[str]:
    """Codes whose PGO id (its closure hash) differs between the cold and warm process."""
    cold, warm = cc.dynamo.code_ids, wc.dynamo.code_ids
    return sorted(k for k in cold.keys() & warm.keys() if cold[k] != warm[k])


def compiles_per_frame(rec: CacheRecord) -> Dict[str, int]:
    """Graphs Inductor compiled, per Dynamo frame."""
    n: Dict[str, int] = defaultdict(int)
    for cid, g in rec.graphs.items():
        if "/" in cid and g.compiled:
            n[cid.split("/")[0]] += 1
    return dict(n)
