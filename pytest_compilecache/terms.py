"""What both sides of a phase say alike: values the child writes into its record and the
controller reads back out of it, and words both of them print. Each side imports them
from here, neither from the other. Pure: no pytest, no torch, nothing of the package.
"""
from __future__ import annotations

import re
from typing import Any, Dict, Optional

# -- an output's name: a gradient's (child/workload.py names them `grad.<param>`)
_GRAD = re.compile(r"(^|\.)grad\.")


def is_gradient(name: str) -> bool:
    return bool(_GRAD.search(name))


# -- the environment a manifest is only comparable within ------------------------------
# (the child computes it, child/workload.environment; history/manifest.py files by it)
ENV_FIELDS = ("torch", "triton", "cuda", "python", "device", "device_name")


def environment(versions: Dict[str, Any], device: Optional[str], device_name: Optional[str]
                ) -> Dict[str, Any]:
    """What a manifest is only comparable within (GPU name, CUDA, Triton are key parts)."""
    env = {k: versions.get(k) for k in ("torch", "triton", "cuda", "python")}
    env.update(device=device, device_name=device_name)
    return env


# -- the float64 reference (child/compare.py applies it, judge/outputs.py names it) ----
# A float64 run that eager misses by more than this (RMS, relative) computed something
# else (other dropout masks, an op that diverges, weights left uninitialised): it is no
# reference for that tensor. Unrelated values miss by ~100%; TF32 noise through
# BatchNorm backward reached 14% on resnet18's early gradients (H100, torch 2.11), so
# the cut sits between, 3.5x above the noise measured.
USABLE_REL = 0.5

# -- what a kernel's stored tuning result (`.best_config`) held when it was tuned anyway:
# `TuningRecord.why`, written by the child's spy (child/tuning.stored_result), read by the
# judge (layers/tuning.py)
NO_CACHE = ("torch keeps no tuning result for it (it had one config when compiled, so no "
            "autotune cache; more were added at launch): it is tuned at every start")
CACHE_OFF = ("torch's autotune cache is off (torch._inductor.config.autotune_local_cache = "
             "False, or force_disable_caches), so no result is kept")
NOT_STORED = "no tuning result stored for it"
OTHER_LIST = "its stored result is for another list of configs"
NOT_RELOADED = ("its stored result names a config outside the kernel's list, which this "
                "torch did not reload")
# two results torch itself throws away, whichever config won (child/tuning.py says when)
SCALED_DECLINED = ("its stored result is a register-spill RBLOCK config torch added at "
                   "launch, which torch's loader declines (torch 2.5-2.12; torch 2.13 reloads "
                   "it: pytorch#181789)")
LOST_MARK = ("torch loaded its stored coordinate-descent result and tuned it again (an "
             "FX-graph hit drops the result's found_by_coordesc mark where it is one of "
             "the kernel's compiled configs: torch 2.11 and older; fixed in torch 2.12, "
             "pytorch#172819)")
IGNORED = "its stored result was there and matched; torch benchmarked anyway"

# -- the private cache root: the fix the child's note (child/confinement.reclaim) and the
# controller's error (judge/confinement.escaped) give where the test's code moved a setting
PRIVATE_FIX = ("to share a cache in your own runs and keep the check's private one, set it "
               "with os.environ.setdefault(...) (the check sets it first)")

# -- bisect: the file a collect-only session writes its checks' node ids to
# (history/baseline.collect_checks asks, controller/collect.py writes)
LIST_CHECKS_ENV = "PYTEST_COMPILECACHE_LIST_CHECKS"

# the compile_cache marker's arguments that shape the check, not torch.compile's
CHECK_KWARGS = ("ranks", "replicas", "compile_once")

# a replica's index (0 .. N-1) in each replica's environment (compile_cache(replicas=N)),
# as a fleet's launcher tells each server which one it is
REPLICA_ENV = "PYTEST_COMPILECACHE_REPLICA"

# compile once, load on N (compile_cache(compile_once=N), child/once.py): set in every
# process of such a check (compile_on_one_rank on), and in the one compiling process the
# world size of its fake process group
ONCE_ENV = "PYTEST_COMPILECACHE_COMPILE_ONCE"
FAKE_WORLD_ENV = "PYTEST_COMPILECACHE_FAKE_WORLD"
