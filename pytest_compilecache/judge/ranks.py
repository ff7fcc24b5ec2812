"""The rules of a multi-rank check (paths/ranks.py): each rank judged as a restart of
its own (the layers' rules over its cold and warm records, its outputs warm vs cold and
compiled vs eager), then what only ranks over one cache show:

- a rank false hit: a warm rank loaded an entry another rank wrote in the cold phase,
  and its outputs differ from its own compile over a root no other rank writes (the
  `private` phase): named with the entry, the writer and loader ranks, what the key
  holds and the fix (judge/false_hits.py says the key the same way for variants);
- what differs between ranks: a layer one rank missed where another hit, keys that
  differ between ranks for one graph, and a warm miss whose logged key components all
  equal the cold run's while the whole key differs (torch's key holds a part that
  changes per process, not the test's code: pytorch#176532's shape).

Which rank wrote an entry comes from the ranks' own records (child/ranks.py: the files
each rank's compile wrote); torch reads a key's files in name order, so the file a rank
loaded is the key's first. The same rules judge the processes of any fleet path
(paths/fleet.py): `Fleet` holds what one process is called and what the rules say of
it (judge/replicas.py's replicas). Pure: no torch, no pytest.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple

from pytest_compilecache import files as fs
from pytest_compilecache.controller.written import entry_dir
from pytest_compilecache.judge.false_hits import _components, _ordered
from pytest_compilecache.judge.outputs import as_written, failed_names
from pytest_compilecache.judge.verdict import judge
from pytest_compilecache.layers import keys
from pytest_compilecache.model import CheckResult
from pytest_compilecache.wire import CacheEntry, PhaseRecord

_LAYERS = ("aot_autograd", "fx_graph")
FIX = ("key the custom graph pass's uuid() by the rank (return the rank with its hash), "
       "or give each rank its own cache dir (TORCHINDUCTOR_CACHE_DIR per rank)")
Writers = Dict[str, Dict[str, Set[int]]]  # entry dir -> file -> the ranks that wrote it


@dataclass(frozen=True)
class Fleet:
    """What one process of a fleet check is called, and what its rules say of it."""
    noun: str = "rank"
    written_in: Tuple[str, ...] = ("cold",)  # the phases whose writes a process may load
    wrote: str = "wrote in the cold phase"  # how a false hit says the writer's write
    fix: str = FIX
    unkeyed: str = "the rank is not in it"  # what the key lacks, in a false hit
    # the cold phase's one process compiled for every process (compile once): its writes
    # are none of theirs, and its name is COMPILING
    compiler: bool = False


RANKS = Fleet()
COMPILER = -1  # the writer of every cold entry where one process compiled for all
COMPILING = "the compiling process"


def named(rank: int, who: str) -> str:
    """A writer by name: a process by its index, or compile once's compiling process."""
    return COMPILING if rank == COMPILER else f"{who} {rank}"


def rank_phase(phase: str, rank: int) -> str:
    """A rank's phase: its spec, record, log and outputs files (`cold.r1`)."""
    return f"{phase}.r{rank}"


def judge_ranks(nodeid: str, phases: Mapping[str, PhaseRecord], snaps: Mapping[str, Any],
                timings: Dict[str, Optional[float]], triton_dir: Optional[Path],
                n: int, via: str = "ranks", fleet: Fleet = RANKS) -> CheckResult:
    """The check's result: each process's own, under `ranks`; its problems theirs."""
    per = [_rank_result(nodeid, phases, snaps, timings, triton_dir, r) for r in range(n)]
    writers = fleet_writers(phases, n, fleet)
    res = CheckResult(nodeid=nodeid, verdict="pass", device=per[0].device,
                      device_name=per[0].device_name, form=per[0].form,
                      versions=per[0].versions, timings=timings, via=via)
    res.layers = {name: worst([p.layers[name] for p in per]) for name in per[0].layers}
    who = fleet.noun
    for r, one in enumerate(per):
        private = phases.get(rank_phase("private", r))
        loaded = cross_loads(phases[rank_phase("warm", r)], writers, r, who)
        hit = rank_false_hit(r, loaded, private, fleet)
        res.problems[:0] = [hit] if hit else []  # the finding first, then what it caused
        res.problems += [f"{who} {r}: {p}" for p in one.problems]
        res.notes += [f"{who} {r}: {x}" for x in one.notes]
        res.notes += shared_note(r, loaded, private, who)
        res.ranks.append(rank_row(r, one, loaded, private, who))
    res.problems += between_ranks(per, who)
    res.notes += keys_between_ranks(phases, n)
    return res.finalize()


def needs_private(phases: Mapping[str, PhaseRecord], n: int, fleet: Fleet = RANKS) -> bool:
    """The private phase has something to judge: a warm process loaded an entry only
    another wrote (else each one's warm run is its own cold compile's restart)."""
    writers = fleet_writers(phases, n, fleet)
    return any(cross_loads(phases[rank_phase("warm", r)], writers, r) for r in range(n)
               if rank_phase("warm", r) in phases)


def shared_note(r: int, loaded: Mapping[str, Dict[str, Any]],
                private: Optional[PhaseRecord], who: str = "rank") -> List[str]:
    """A process that loaded another's entries and computed what its own compile
    does: what one cache for the node's ranks (or the fleet's replicas) is for."""
    cmp = private.compare_cold if private is not None else None
    if not loaded or cmp is None or not cmp.ok:
        return []
    by = sorted({e["writer"]["rank"] for e in loaded.values()})
    writers = COMPILING if by == [COMPILER] else f"{who}(s) {', '.join(map(str, by))}"
    return [f"{who} {r} loaded {len(loaded)} entr(ies) that {writers} wrote, and "
            f"computed what its own compile over a root of its own does ({cmp.mode})"]


def first_of(phases: Mapping[str, Any], phase: str, r: int) -> str:
    """Process r's record of a phase: its own where the phase ran as many, else the
    phase's one (process 0's: the replicas' cold phase)."""
    mine = rank_phase(phase, r)
    return mine if mine in phases else rank_phase(phase, 0)


def _rank_result(nodeid: str, phases: Mapping[str, PhaseRecord], snaps: Mapping[str, Any],
                 timings: Dict[str, Optional[float]], triton_dir: Optional[Path],
                 r: int) -> CheckResult:
    cold, warm = first_of(phases, "cold", r), rank_phase("warm", r)
    mine = {f"{phase}{k[len(ran):]}": v for phase, ran in (("cold", cold), ("warm", warm))
            for k, v in timings.items() if k.startswith(ran + "_")}
    res = judge(nodeid, phases[cold], phases[warm], snaps[cold],
                fs.added(snaps[cold], snaps[warm]), mine, triton_dir)
    for p in list(res.problems):  # a warm miss whose logged components all agree
        why = process_part(phases[cold], phases[warm], p)
        if why:
            res.problems[res.problems.index(p)] = f"{p} - {why}"
    return res


def worst(verdicts: List[Any]) -> Any:
    """A layer's row for the check: the rank that did worst (a miss, then a bypass)."""
    order = ("miss", "bypass", "off", "accepted", "n/a", "hit")
    return min(verdicts, key=lambda lv: order.index(lv.state) if lv.state in order
               else 0)


def cold_writers(phases: Mapping[str, PhaseRecord], n: int,
                 written_in: Tuple[str, ...] = ("cold",)) -> Writers:
    """Each entry file in the shared root, and which processes' compiles wrote it (in
    the cold phase, or those `written_in` names)."""
    out: Writers = {}
    for phase in written_in:
        for r in range(n):
            for rel in writes_of(phases.get(rank_phase(phase, r))):
                folder, _, name = str(rel).rpartition("/")
                out.setdefault(folder, {}).setdefault(name, set()).add(r)
    return out


def fleet_writers(phases: Mapping[str, PhaseRecord], n: int, fleet: Fleet) -> Writers:
    """The writers of the shared root's entries, as the fleet's rules see them: where
    one process compiled for all (compile once), that process (COMPILER) alone."""
    writers = cold_writers(phases, n, fleet.written_in)
    if not fleet.compiler:
        return writers
    return {folder: {name: {COMPILER} for name in files} for folder, files in writers.items()}


def writes_of(rec: Optional[PhaseRecord]) -> Dict[str, Any]:
    """The entry files a process's compile wrote (child/ranks.py): file -> digest."""
    return ((rec.raw.get("rank") or {}).get("writes") or {}) if rec else {}


def cross_loads(warm: PhaseRecord, writers: Writers, r: int, who: str = "rank"
                ) -> Dict[str, Dict[str, Any]]:
    """The entries warm rank `r` loaded from a file only other ranks wrote: key ->
    {layer, graph, backward, components, writer, files} (as the variants' ledger)."""
    out: Dict[str, Dict[str, Any]] = {}
    for gid, events in warm.cache.graphs.items():
        for layer in _LAYERS:
            for e in events.entries(layer):
                files = (writers.get(str(entry_dir(Path(""), layer, str(e.key))), {})
                         if e.state == "hit" and e.key else {})
                if not files:
                    continue
                first = sorted(files)[0]  # torch reads a key's files in name order
                if r not in files[first]:
                    out[str(e.key)] = _loaded(layer, gid, e, files, first, who)
    return out


def _loaded(layer: str, gid: str, e: CacheEntry, files: Mapping[str, Set[int]],
            first: str, who: str) -> Dict[str, Any]:
    return {"layer": layer, "graph": gid, "backward": e.backward,
            "components": [list(c) for c in e.components],
            "writer": {"id": named(min(files[first]), who), "rank": min(files[first])},
            "files": {name: sorted(ranks) for name, ranks in sorted(files.items())}}


def rank_false_hit(r: int, loaded: Mapping[str, Dict[str, Any]],
                   private: Optional[PhaseRecord], fleet: Fleet = RANKS) -> Optional[str]:
    """The false hit of warm process `r` (a rank false hit, a replica false hit), a
    line each, or None."""
    cmp = private.compare_cold if private is not None else None
    if not loaded or cmp is None or cmp.ok:
        return None
    key, entry = _ordered(loaded)[0]
    writer, who = entry["writer"]["rank"], fleet.noun
    first = cmp.mismatches[0]
    files = entry.get("files") or {}
    several = ""
    if len(files) > 1:
        several = (f"; the key's folder holds {len(files)} files, whose bytes differ, from "
                   + ", ".join(named(min(v), who) for v in files.values()))
    more = len(loaded) - 1
    comps = _components(entry.get("components") or [], who=f"{who}s")
    return "\n    ".join((
        f"{who} false hit: {who} {r} loaded the {entry['layer']} entry {key[:16]}… of graph "
        f"{entry['graph']}{' (backward)' if entry.get('backward') else ''} that "
        f"{named(writer, who)} {fleet.wrote} (same key){f', and {more} more' if more else ''}",
        f"outputs: {who} {r}'s warm outputs differ from its own compile over a root no "
        f"other {who} writes in {len(cmp.mismatches)} tensor(s); first {first.name}: "
        f"{first.message}",
        f"writer and loader: {named(writer, who)} wrote it, {who} {r} loaded it (torch "
        f"reads a key's files in name order){several}",
        f"what the key holds: {comps}; {fleet.unkeyed}",
        f"fix: {fleet.fix}"))


def process_part(cold: PhaseRecord, warm: PhaseRecord, problem: str) -> Optional[str]:
    """Where a warm miss's key differs from the cold run's with every logged component
    equal: what can be proven about why (None: a component differs, or none logged)."""
    if "miss" not in problem:
        return None
    for gid, events in warm.cache.graphs.items():
        for mine in events.entries("fx_graph"):
            twin = keys.best_match(mine, (cold.cache.graphs.get(gid) or events).fx_graph)
            if (mine.state != "miss" or twin is None or twin.key == mine.key
                    or not mine.components or keys.differing_components(twin, mine)):
                continue
            return (f"all {len(mine.components)} logged components of graph {gid}'s FX key "
                    f"hash the same in the cold and warm processes, yet the whole key "
                    f"differs: torch hashes into the key something it does not log that "
                    f"differs between two processes of the same program (not the test's "
                    f"code), so every restart of it misses (pytorch#176532's shape)")
    return None


def between_ranks(per: List[CheckResult], who: str = "rank") -> List[str]:
    """A layer one process missed where another hit, each."""
    out = []
    for name in per[0].layers:
        states = {r: p.layers[name].state for r, p in enumerate(per) if name in p.layers}
        hit = [r for r, s in states.items() if s == "hit"]
        missed = [r for r, s in states.items() if s == "miss"]
        if hit and missed:
            out.append(f"{name}: {who}(s) {', '.join(map(str, missed))} missed where "
                       f"{who}(s) {', '.join(map(str, hit))} hit")
    return out


def keys_between_ranks(phases: Mapping[str, PhaseRecord], n: int) -> List[str]:
    """Keys of one graph that differ between the ranks' cold runs, with what differs."""
    out = []
    base = phases.get(rank_phase("cold", 0))
    for r in range(1, n):
        other = phases.get(rank_phase("cold", r))
        if base is None or other is None:
            continue
        for gid, events in other.cache.graphs.items():
            mine = (base.cache.graphs.get(gid) or events).fx_graph
            for e in events.fx_graph:
                twin = keys.best_match(e, mine)
                if twin is None or twin.key == e.key:
                    continue
                comps = keys.differing_components(twin, e)
                said = (", ".join(c["component"] for c in comps[:4]) if comps else
                        "none of its logged components (a part torch does not log)")
                out.append(f"keys differ between ranks: graph {gid}'s FX key on rank {r} is "
                           f"not rank 0's; differing: {said}")
                break
    return out


def rank_row(r: int, one: CheckResult, loaded: Mapping[str, Any],
             private: Optional[PhaseRecord], who: str = "rank") -> Dict[str, Any]:
    """A rank (a replica: `noun`) under its check's row, in every output."""
    cmp = private.compare_cold if private is not None else None
    return {"rank": r, "noun": who, "verdict": one.verdict,
            "layers": {k: {"state": lv.state, "cold": lv.cold, "warm": lv.warm,
                           "reasons": lv.reasons} for k, lv in one.layers.items()},
            "outputs": {**one.outputs,
                        "private_vs_warm": as_written(cmp, failed_names(cmp)) or {}},
            "loaded_from_other_ranks": [{"key": k, "layer": e["layer"], "graph": e["graph"],
                                         "writer": e["writer"]["rank"]}
                                        for k, e in loaded.items()],
            "problems": one.problems}
