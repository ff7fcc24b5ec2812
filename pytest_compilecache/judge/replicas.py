"""The rules of a replicated check (paths/replicas.py): N replicas of one single-process
program warm over one cache that one replica built cold, as a fleet of inference
servers warms from one cache dir, one per GPU. Each replica is judged by the ranks'
rules (judge/ranks.py, with a replica's words): its layers over replica 0's cold
records and its own warm ones, its outputs warm vs cold and compiled vs eager, and
where it loaded an entry another replica wrote, its warm outputs against its own
compile over a root no other replica writes (a replica false hit: the entry, the
writer, the loader, what the key holds, the fix).

What only replicas started together over one cache show: the root after the warm
phase, where they read (and a replica that missed wrote) at once, must still be a
valid cache. Its smallest real check: every entry file the cold replica built is
still there at its size (files.damaged, the restart's own check of a root), and every
entry file a warm replica wrote is there whole, at the size that replica wrote (the
size each process's observed writes recorded, child/ranks.py): a torn or partial entry,
or one another writer's removal took, is named with its writer. Pure: no torch, no
pytest.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from pytest_compilecache import files as fs
from pytest_compilecache.judge.ranks import Fleet, judge_ranks, rank_phase
from pytest_compilecache.model import CheckResult
from pytest_compilecache.wire import PhaseRecord

REPLICAS = Fleet(
    noun="replica", written_in=("cold", "warm"), wrote="wrote",
    fix=("key the custom graph pass's uuid() by what differs between the replicas (return "
         "it with its hash), or give each replica its own cache dir (TORCHINDUCTOR_CACHE_DIR "
         "per replica)"),
    unkeyed="what differs between the replicas is not in it")
_ENTRIES = ("inductor/fxgraph/", "inductor/aotautograd/")


def judge_replicas(nodeid: str, phases: Mapping[str, PhaseRecord], snaps: Mapping[str, Any],
                   timings: Dict[str, Optional[float]], triton_dir: Optional[Path],
                   n: int) -> CheckResult:
    """Each replica's own result, under the check's row; the shared root's damage."""
    res = judge_ranks(nodeid, phases, snaps, timings, triton_dir, n, "replicas", REPLICAS)
    res.problems += shared_root_damage(phases, snaps, n)
    return res.finalize()


def shared_root_damage(phases: Mapping[str, PhaseRecord], snaps: Mapping[str, Any],
                       n: int) -> List[str]:
    """What the replicas' warm phase left broken in the root they share, a line each."""
    after = snaps.get(rank_phase("warm", 0))
    built = snaps.get(rank_phase("cold", 0))
    if after is None or built is None:
        return []
    cold = {p: s for p, s in built.items() if p.startswith(_ENTRIES)}
    out = [f"shared cache damaged while {n} replicas read and wrote it at once: {line} "
           f"(replica 0 built it cold)" for line in fs.damaged(cold, after)]
    for r in range(n):
        out += [f"shared cache damaged while {n} replicas read and wrote it at once: {line}"
                for line in torn(phases.get(rank_phase("warm", r)), after, r)]
    return out


def torn(warm: Optional[PhaseRecord], after: Mapping[str, int], r: int) -> List[str]:
    """The entry files warm replica `r` wrote that are not in the root whole."""
    sizes = ((warm.raw.get("rank") or {}).get("sizes") or {}) if warm else {}
    out = []
    for rel, size in sorted(sizes.items()):
        now = after.get(f"inductor/{rel}")
        if now != size:
            said = "missing" if now is None else f"{now} bytes"
            out.append(f"inductor/{rel}: {said}, replica {r} wrote {size} bytes")
    return out
