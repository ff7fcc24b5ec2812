"""A phase's slot: the device slot it holds while it runs, and the GPU the child is
pointed at (controller/gpus.py's pool; --compile-cache-warm-on-other-gpu's layouts)."""
from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, Dict, Iterator

from pytest_compilecache.wire import PhaseSpec


@contextlib.contextmanager
def phase_lease(run: Any, phase: str, env: Dict[str, str], spec: PhaseSpec,
                spec_path: Path) -> Iterator[Any]:
    """Hold a slot for one phase (`run`: its CheckRun) and point the child at its GPU. A phase the path
    plans on another GPU (--compile-cache-warm-on-other-gpu) leases the GPU after the
    cold phase's: with the `index` layout every phase sees (cold GPU, next GPU) and
    runs on its own of the two; with `pinned` each sees only its own, as cuda:0."""
    pool = run.session.slot_pool()
    devices = list(dict.fromkeys(sl.device for sl in pool.slots))
    layout = run.path.gpu_layout if len(devices) > 1 else ""
    plan = next((p for p in run.path.phases if p.name == phase), None)

    def after(dev: str) -> str:
        return devices[(devices.index(dev) + 1) % len(devices)]

    cold = run.cold_device if run.cold_device in devices else None
    want = (after(cold) if layout and cold and plan is not None and plan.other_gpu
            else None)
    with pool.lease(f"{run.item.nodeid} [{phase}]", device=want) as lease:
        dev = lease.slot.device
        if phase == "cold":
            run.cold_device = cold = dev
        if layout == "index" and cold:
            pair = [cold, after(cold)]
            env["CUDA_VISIBLE_DEVICES"] = ",".join(pair)
            spec["cuda_index"] = pair.index(dev)
            spec_path.write_text(json.dumps(spec))
        else:
            env.update(lease.slot.env())
        yield lease
