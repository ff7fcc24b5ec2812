"""Compiled kernels: Triton's cache and Inductor's C++ kernels (and the precompiled
headers they share). Its rule: a kernel the warm run compiled or wrote is a miss, named
with what did not carry it, or with the key that moved where the kernel is byte for byte
the cold one's. Pure: reads typed cache records."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from pytest_compilecache import files as fs
from pytest_compilecache.layers import tuning
from pytest_compilecache.layers.autotune import Autotune
from pytest_compilecache.layers.base import CacheLayer, Carrier, LayerInputs
from pytest_compilecache.model import LayerVerdict
from pytest_compilecache.wire import CacheRecord
from pytest_compilecache.wirejson import Wire


@dataclass
class PtxasPath(Wire):
    start: Optional[str] = None
    end: Optional[str] = None


@dataclass
class KernelInfo(Wire):
    """The layer's section of a cache record (child/triton.py's TritonObserver)."""
    triton_listener: bool = False
    triton_compiled: Optional[int] = None      # None without the listener (triton < 3.6)
    triton_disk_hits: Optional[int] = None
    compiled_names: List[str] = field(default_factory=list)  # child/triton.COMPILED_NAMES
    kernels_via_triton_compile: int = 0
    autotune_cache_states: List[str] = field(default_factory=list)
    ptxas_path: Optional[PtxasPath] = None


class Kernels(CacheLayer):
    name, short, short_md = "kernels", "kernels", "kernels"
    observed = ("Triton compiles in the phase (a compile listener where Triton has one) "
                "and the kernel files the phase wrote")
    observer = "pytest_compilecache.child.triton:TritonObserver"
    section, record_type = "kernels", KernelInfo
    heads = ("triton",)
    tops = ("triton", "tmp")
    suffixes = (".so", ".cpp", ".o", ".h", ".cubin", ".ptx", ".ttir", ".ttgir", ".llir",
                ".hsaco", ".json", ".source")

    def owns_top(self, parts: List[str]) -> bool:
        """Triton's own dir; in the temp dir, only the precompiled headers."""
        return parts[0] == "triton" or (parts[0] == "tmp" and "precompiled_headers" in parts)

    def judge(self, inputs: LayerInputs) -> Tuple[LayerVerdict, List[str]]:
        lv = kernels_layer(inputs.cold, inputs.warm, inputs.cold_files)
        return lv, tuning_compiles(lv, inputs.warm)

    def warm_wrote(self, lv: LayerVerdict, paths: List[str], inputs: LayerInputs) -> None:
        """A miss, named with what the warm process started from where that did not
        carry the kernels; a kernel byte-identical to a cold one, with the key that
        moved. The files of kernels torch re-tuned itself are that tuning's
        (tuning_compiles)."""
        spared = set(tuning.spared(inputs.warm.sections.get(Autotune.section)))
        paths = [p for p in paths if _kernel_name(p) not in spared]
        if not paths:
            return
        super().warm_wrote(lv, paths, inputs)
        if inputs.carrier:
            lv.reasons.insert(0, rebuilt_kernels(paths, inputs.carrier))
        if inputs.triton_dir is not None:
            explain_identical_recompiles(lv, fs.identical_triton_recompiles(
                inputs.triton_dir, paths), inputs.cold, inputs.warm)

    def load_compiles(self, warm: CacheRecord) -> List[str]:
        n = kernel_info(warm).triton_compiled or 0
        return [f"{n} Triton kernel(s) compiled"] if n else []

    def unpacked(self, warm: CacheRecord, paths: List[str]) -> Tuple[List[str], Optional[str]]:
        """Files in the Triton cache that no Triton compile wrote: the FX entries bundle
        their kernels, and a load writes them out. Only when Triton's compile listener
        ran and counted no compile; without it every such file stays suspect."""
        info = kernel_info(warm)
        if not info.triton_listener or info.triton_compiled:
            return [], None
        unpacked = [p for p in paths if p.startswith("triton/")]
        if not unpacked:
            return [], None
        helpers = [p for p in unpacked if p.endswith(".so")]
        return unpacked, (f"Triton compiled no kernel in the warm process; it wrote "
                          f"{len(unpacked) - len(helpers)} kernel file(s) unpacked from the "
                          f"artifact into its empty cache, and built {len(helpers)} driver "
                          f"stub(s) (cuda_utils, __triton_launcher: C, per kernel signature, "
                          f"in no artifact)")

    def rebuilt(self, lv: LayerVerdict, paths: List[str], carrier: Carrier) -> bool:
        lv.state, lv.files, lv.warm = "miss", paths, f"{len(paths)} new file(s)"
        lv.reasons = [rebuilt_kernels(paths, carrier)]
        return True


def kernel_info(rec: CacheRecord) -> KernelInfo:
    """A phase's kernels section (empty where it wrote none)."""
    return KernelInfo.from_json(rec.sections.get(Kernels.section))


def kernels_layer(cc: CacheRecord, wc: CacheRecord, cold_kernel_files: List[str]
                  ) -> LayerVerdict:
    ck, wk = kernel_info(cc), kernel_info(wc)
    lv = LayerVerdict(state="hit", cold=f"{len(cold_kernel_files)} file(s) built")
    warm_compiled = wk.triton_compiled or 0
    lv.warm = "no new file"
    if wk.triton_listener:
        lv.warm += f", {warm_compiled} Triton compile(s)"
    if not cold_kernel_files and not ck.kernels_via_triton_compile:
        lv.state, lv.reasons = "n/a", ["cold compiled no C++ or Triton kernel"]
    if warm_compiled:
        lv.state = "miss"
        lv.reasons.append(f"the warm run compiled {warm_compiled} Triton kernel(s) from source")
    return lv


def _kernel_name(path: str) -> str:
    """triton/<key>/[__grp__]<kernel>.<ext> -> <kernel>"""
    base = path.rsplit("/", 1)[-1]
    return base.removeprefix("__grp__").split(".")[0]


def tuning_compiles(lv: LayerVerdict, wc: CacheRecord) -> List[str]:
    """Triton compiles of kernels torch re-tuned itself at a cost that leaves the start
    warm (layers/tuning.spared: new configs are compiled to be timed): part of that
    tuning, which the autotune layer notes, not a kernel the cache lost."""
    info = kernel_info(wc)
    own = set(tuning.spared(wc.sections.get(Autotune.section)))
    ours = [n for n in info.compiled_names if n in own]
    if not ours or lv.state != "miss" or len(ours) < (info.triton_compiled or 0):
        return []
    lv.state, lv.reasons = "hit", []
    return [f"kernels: the warm run's {len(ours)} Triton compile(s) were torch re-tuning "
            f"{len(set(ours))} kernel(s) it tunes at every start (the autotune note says "
            f"why): no kernel the cache held was compiled again"]


def explain_identical_recompiles(lv: LayerVerdict, twins: List[Dict[str, str]],
                                 cc: CacheRecord, wc: CacheRecord) -> None:
    """A warm kernel byte-identical to a cold one: the key moved, not the kernel."""
    if not twins:
        return
    names = ", ".join(f"{t['kernel']} ({t['cold'][:8]} -> {t['warm'][:8]})" for t in twins[:3])
    lv.reasons.append(
        f"{len(twins)} warm Triton kernel(s) are byte-identical to ones cold built, under "
        f"another Triton key: the key changed outside the kernel source (its toolchain "
        f"part, e.g. the ptxas version; Triton options; TRITON_* env vars): {names}")
    for phase, rec in (("cold", cc), ("warm", wc)):
        ptxas = kernel_info(rec).ptxas_path
        if ptxas is not None and ptxas.start != ptxas.end:
            lv.reasons.append(
                f"TRITON_PTXAS_PATH changed during the {phase} run ({ptxas.start!r} -> "
                f"{ptxas.end!r}): torch sets it lazily on some compile paths, so kernels "
                f"compiled before and after use different ptxas versions and keys; set "
                f"TRITON_PTXAS_PATH explicitly (to {ptxas.end!r}) before starting")
            break



def rebuilt_kernels(paths: List[str], carrier: Carrier) -> str:
    objects = [p for p in paths if p.endswith(".so")]
    return (f"the warm process rebuilt {len(objects)} C++ kernel object(s) and "
            f"{len(paths) - len(objects)} other kernel file(s) that {carrier.name} did not "
            f"carry" + (f" ({carrier.why})" if carrier.why else "") + ": "
            + ", ".join(p.rsplit("/", 1)[-1] for p in (objects or paths)[:5]))
