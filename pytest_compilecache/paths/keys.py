"""Keys without kernels (--compile-cache-keys-only): a cold phase that stops each graph's
compile once its cache keys are computed and logged (child/keysonly.py says where), to
record the key manifest in a fraction of a cold compile; no verdict. Where torch cannot
stop there the phase compiles in full and the check says so."""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Dict, Iterator, Optional

from pytest_compilecache.model import CheckResult
from pytest_compilecache.paths.base import Info, Records, Snapshots
from pytest_compilecache.paths.record import RecordKeys
from pytest_compilecache.wire import PhaseRecord


class KeysOnly(RecordKeys):
    """Cold only, stopped before code generation: the manifest of a cold run's keys."""
    name = "keys"
    keys_only = True

    def judge(self, nodeid: str, recs: Records, snaps: Snapshots,
              timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        res = super().judge(nodeid, recs, snaps, timings, triton_dir)
        said = PhaseRecord.from_json(recs["cold"]).artifact.raw.get(self.name) or {}
        if said.get("why_not"):
            res.notes.append(f"keys-only: compiled in full ({said['why_not']})")
        else:
            res.notes.append(f"keys-only: {said.get('stopped', 0)} graph(s) stopped before "
                             f"Inductor's code generation once their keys were logged"
                             + (f", {said['lowered']} training forward(s) stopped after "
                                f"lowering (the layout it gives their saved activations is "
                                f"in the backward's key)" if said.get("lowered") else "")
                             + (f", {said['full']} training forward(s) compiled in full "
                                f"(Inductor's layout of their saved activations is in the "
                                f"backward's key)" if said.get("full") else ""))
        return res

    # -- the phase child's side --

    @contextlib.contextmanager
    def watching(self, info: Info, device: str) -> Iterator[None]:
        from pytest_compilecache.child.keysonly import KeysOnly as Stop

        stop = Stop()
        stopping = stop.start()
        try:
            yield
        finally:
            stop.stop()
            info[self.name] = {"stopped": stop.graphs, "lowered": stop.lowered, "full": stop.full,
                               "why_not": None if stopping else stop.why_not}
