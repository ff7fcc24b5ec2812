"""The phases of a fleet path (paths/fleet.py: the ranks of `compile_cache(ranks=N)`),
each with its own number of processes (`FleetRestart.processes`): one, or N started
together, as torchrun starts a node's ranks (env rendezvous on a free local port where
the phase's processes form a process group; the group itself is child/ranks.py's), each
in the phase's cache root (the one they share, or for a fresh-root phase one each).

The processes of a phase start, run and end as one (ranks wait for each other in every
collective): each holds its device slot (one GPU per process, leased in the GPUs' order
so that two such checks never wait on each other's; on CPU they share one slot), gets
the phase's time limit, and where one fails the others are ended at once (an abort file
their watcher reads) instead of waiting out the group's timeout; each process's error
is reported as its own.
"""
from __future__ import annotations

import contextlib
import re
import socket
import threading
import traceback
from typing import Any, Dict, Iterator, List, Optional, Tuple

from pytest_compilecache import files as fs
from pytest_compilecache.controller.check import CheckRun
from pytest_compilecache.isolation import CacheRoot
from pytest_compilecache.judge import accepted
from pytest_compilecache.launch.becoming import THREADS_ENV
from pytest_compilecache.judge.ranks import needs_private, rank_phase
from pytest_compilecache.model import CheckResult, error_result
from pytest_compilecache.paths.base import PhasePlan, WarmStartPath
from pytest_compilecache.paths.local import LocalRestart
from pytest_compilecache.paths.compile_once import CompileOnceRestart
from pytest_compilecache.paths.fleet import FleetRestart
from pytest_compilecache.paths.ranks import RankedRestart
from pytest_compilecache.paths.replicas import ReplicatedRestart
from pytest_compilecache.terms import REPLICA_ENV
from pytest_compilecache.wire import PhaseRecord, PhaseSpec

Outcome = Tuple[Optional[PhaseRecord], Optional[CheckResult]]


FLEETS = (("ranks", RankedRestart), ("replicas", ReplicatedRestart),
          ("compile_once", CompileOnceRestart))


def ranks_of(item: Any, settings: Any, what: str = "ranks") -> int:
    """The check's ranks (or replicas: `what`): its marker's ranks=N, else the
    session's --compile-cache-ranks."""
    marker = item.get_closest_marker("compile_cache")
    if marker is not None and what in marker.kwargs:
        return int(marker.kwargs[what])
    return int(getattr(settings, what, 1) or 1)


def fleet_of(item: Any, settings: Any) -> Tuple[str, int]:
    """The check's fleet (ranks or replicas) and its size: its marker's, else the
    session's (a marker of one overrides a session of the other)."""
    marker = item.get_closest_marker("compile_cache")
    marked = [what for what, _ in FLEETS if marker is not None and what in marker.kwargs]
    for what in marked or [what for what, _ in FLEETS]:
        n = ranks_of(item, settings, what)
        if n > 1 or marked:
            return what, n
    return "", 1


def paths_for(item: Any, chosen: List[WarmStartPath], settings: Any) -> List[WarmStartPath]:
    """The paths a check takes: a multi-rank (replicated) check the ranks' (replicas')
    restart alone (the `ranks` or `replicas` scenario, per check from its marker); a
    check marked ranks=1 in a session of ranks, the local restart."""
    what, n = fleet_of(item, settings)
    if n > 1:
        cls = dict(FLEETS)[what]
        return [p for p in chosen if type(p) is cls and p.size == n] or [cls(n)]
    return [p for p in chosen if not isinstance(p, FleetRestart)] or [LocalRestart()]


def check_run(session: Any, item: Any, path: WarmStartPath) -> CheckRun:
    if isinstance(path, FleetRestart):
        return FleetCheckRun(session, item, path)
    return CheckRun(session, item, path)


def rank_env(rank: int, world: int, port: int, threads: int) -> Dict[str, str]:
    """What torchrun sets for a rank of one node (env:// rendezvous); the check's
    threads shared by its ranks (torchrun gives each of several ranks 1)."""
    return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
            "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(world), "GROUP_RANK": "0",
            **threads_env(world, threads)}


def threads_env(world: int, threads: int) -> Dict[str, str]:
    """The check's threads shared by the phase's processes."""
    return {THREADS_ENV: str(max(1, threads // world))}


def replica_env(replica: int, replicas: int, threads: int) -> Dict[str, str]:
    """What a replica is told: which one it is (a fleet's launcher tells each of its
    servers), and its share of the check's threads: the same in every phase, the cold
    replica's too (Inductor keys a CPU graph by its thread count,
    cpp_runtime_thread_count: a cold replica with all the threads misses every warm)."""
    return {REPLICA_ENV: str(replica), **threads_env(replicas, threads)}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def process_env(path: FleetRestart, plan: PhasePlan, r: int, port: int, threads: int
                ) -> Dict[str, str]:
    """Process r's environment in its phase: torchrun's where the phase's processes
    form a group, else a replica's; the check's threads shared by the path's N in every
    phase, a phase of one process too."""
    if plan.process_group:
        return rank_env(r, path.processes(plan), port, threads)
    return replica_env(r, path.size, threads)


class FleetCheckRun(CheckRun):
    """A CheckRun whose phases each run as one process or N at once (the path's
    `processes(plan)`); the records are per process (`cold.r0`, `warm.r1`, ...),
    judged by the path (judge/ranks.py)."""

    path: FleetRestart

    def __init__(self, *args: Any) -> None:
        self._here = threading.local()  # which phase this rank's thread runs
        super().__init__(*args)
        self._held: List[Any] = []  # the phase's leases, by rank
        self._preparing = threading.Lock()  # one rank at a time writes into the root

    def _spec_and_env(self, *args: Any) -> Any:
        """A rank's spec and environment, one rank at a time: the ranks of a phase
        share its root, and the precompiled-header link in it is made once."""
        with self._preparing:
            return super()._spec_and_env(*args)

    @property
    def lane(self) -> int:
        """The preloaded interpreter this thread's process forks from (`lane_of`;
        CheckRun asks `lane + (phase != "cold")`, and a rank's phase is `cold.r0`)."""
        r, cold = getattr(self._here, "rank", 0), getattr(self._here, "cold", False)
        return self.lane_of(r, cold) - 1

    @lane.setter
    def lane(self, value: int) -> None:
        self._lane = value

    def lane_of(self, r: int, cold: bool) -> int:
        """Each rank a pair of interpreters of its own, after the two a check of one
        process uses (the ranks of a phase start at once, an interpreter serves one
        phase at a time, and each starts with its processes' threads: `_widen`): rank
        r's cold phase forks from one, its later phases from the other. Forked from one
        interpreter, two processes share its hash seed and object addresses: a key
        that holds a per-process hash would hit between them, never in a restart."""
        return self._lane + 2 + 2 * r + (not cold)

    def _widen(self) -> None:
        """The pairs started now, from this thread (the session's), each with the
        threads its processes start with (OMP_NUM_THREADS, read by OpenMP as it
        loads: a forked rank then has what a fresh one has, in every thread)."""
        widen = getattr(self.session.launcher, "widen", None)
        if widen is None:
            return
        for plan in self.path.phases:
            for r in range(self.path.processes(plan)):
                lane = self.lane_of(r, plan.name == "cold")
                threads = process_env(self.path, plan, r, 0, self.settings.threads)
                widen(lane + 1, {THREADS_ENV: threads[THREADS_ENV]}, first=lane)

    def phases(self) -> CheckResult:
        nodeid, who = self.item.nodeid, self.path.noun
        self._widen()
        root = CacheRoot.create(nodeid, self.settings.root)
        self.roots.append(root)
        for plan in self.path.phases:
            self.phase_now, n = plan.name, self.path.processes(plan)
            if plan.fresh_root and not needs_private(self.recs, n, self.path.fleet):
                self.notes.append(f"no warm {who} loaded an entry only another {who} wrote: "
                                  f"the {plan.name} phase (each {who} over its own root) "
                                  f"was not run")
                break
            roots = [root] * n
            if plan.fresh_root:  # each process its own: no other process writes it
                roots = [CacheRoot.create(f"{nodeid}-{who}{r}", self.settings.root)
                         for r in range(n)]
                self.roots += roots
            failed = self._run_processes(plan, roots)
            if failed is not None:
                return failed
            for r in range(n):
                self.snaps[rank_phase(plan.name, r)] = fs.snapshot(roots[r].watched)
            self._phase_timings(plan.name, n)
            if not all(self.path.goes_on(self.recs[rank_phase(plan.name, r)])
                       for r in range(n)):  # the path is n/a here (compile_once: no API)
                break
        self.notes[:] = fresh_notes(self.notes, self.path.noun)
        result = self.path.judge(nodeid, self.recs, self.snaps, self.timings, root.triton)
        accepted.apply(result, self._accepted())
        return result

    def _run_processes(self, plan: PhasePlan, roots: List[CacheRoot]
                       ) -> Optional[CheckResult]:
        n, port = self.path.processes(plan), free_port()
        abort = self.roots[0].phases / f"{plan.name}.abort"
        outcomes: List[Outcome] = [(None, None)] * n
        try:
            with self._leases(plan) as held:
                self._held = held

                def one(r: int) -> None:
                    outcomes[r] = self._rank(plan, r, roots[r], port, abort)

                threads = [threading.Thread(target=one, args=(r,), daemon=True)
                           for r in range(n)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
        except Exception as e:  # a lease timeout, a lock dir refused: the check errors
            from pytest_compilecache.controller.gpus import LeaseTimeout

            if not isinstance(e, (LeaseTimeout, OSError)):
                raise
            return error_result(self.item.nodeid, plan.name, str(e), "", self.timings)
        for r, (rec, _) in enumerate(outcomes):
            if rec is not None:
                self.recs[rank_phase(plan.name, r)] = rec
        return self._failed(plan.name, outcomes)

    def _rank(self, plan: PhasePlan, r: int, root: CacheRoot, port: int, abort: Any
              ) -> Outcome:
        """One process, in its thread: an exception here is this process's error (the
        others are ended), never a thread that dies while they wait for it."""
        phase = rank_phase(plan.name, r)
        self._here.cold, self._here.rank = plan.name == "cold", r
        env = process_env(self.path, plan, r, port, self.settings.threads)
        try:
            rec, failure = self.run_phase(root, phase, extra=self._extra(plan, r, abort),
                                          env_extra={**self.path.phase_env(plan), **env})
        except Exception:
            rec, failure = None, error_result(
                self.item.nodeid, phase, "could not be run: pytest-compilecache failed in the "
                "controller (an error in the plugin, not in the model):\n"
                + traceback.format_exc(), "", self.timings)
        if failure is not None or rec is None:
            with contextlib.suppress(FileExistsError, OSError):  # the first failure says
                with open(abort, "x") as f:
                    f.write(f"{self.path.noun} {r} of the {plan.name} phase failed")
        return rec, failure

    def _extra(self, plan: PhasePlan, r: int, abort: Any) -> PhaseSpec:
        """A process's spec: its index, whether it joins a process group, the abort
        file, its outputs (in the first root)."""
        phases = self.roots[0].phases
        extra: PhaseSpec = {"path": self.path.name, "rank": r,
                            "world_size": self.path.processes(plan),
                            "process_group": plan.process_group, "ranks_abort": str(abort),
                            "cold_outputs": str(phases / f"{self._peer('cold', r)}-outputs.pt")}
        if plan.keeps_outputs:
            extra["save_outputs"] = str(phases / f"{rank_phase(plan.name, r)}-outputs.pt")
        if plan.compare_with:
            extra["compare_outputs"] = str(
                phases / f"{self._peer(plan.compare_with, r)}-outputs.pt")
        return extra

    def _peer(self, phase: str, r: int) -> str:
        """The process of an earlier phase that process `r` is held to: its own where
        that phase ran as many, else that phase's one (process 0)."""
        plan = next(p for p in self.path.phases if p.name == phase)
        return rank_phase(phase, r if r < self.path.processes(plan) else 0)

    def _failed(self, phase: str, outcomes: List[Outcome]) -> Optional[CheckResult]:
        """The phase's error, each failed rank's own (the ranks the abort ended, said)."""
        failed = [(r, f or error_result(self.item.nodeid, rank_phase(phase, r), "left no record",
                                        "", self.timings))
                  for r, (rec, f) in enumerate(outcomes) if f is not None or rec is None]
        if not failed:
            return None
        noun = self.path.noun
        text = "\n".join(f"{noun} {r}: {f.error}" for r, f in failed)
        who = " and ".join(str(r) for r, _ in failed)
        res = error_result(self.item.nodeid, phase, f"failed on {noun} {who} of "
                           f"{len(outcomes)} (the first {noun} to fail ends the others of "
                           f"its phase):\n{text}", "", self.timings)
        res.via = self.path.via
        return res

    def _phase_timings(self, phase: str, n: int) -> None:
        """The phase's times: its slowest process's (they end together)."""
        for what in ("s", "process_s"):
            each = [self.timings.get(f"{rank_phase(phase, r)}_{what}") for r in range(n)]
            known = [t for t in each if t is not None]
            if known:
                self.timings[f"{phase}_{what}"] = max(known)

    @contextlib.contextmanager
    def _leases(self, plan: PhasePlan) -> Iterator[List[Any]]:
        """Every process's slot for the phase: one GPU per process, in the GPUs'
        order; on CPU one slot they share."""
        pool = self.session.slot_pool()
        devices = list(dict.fromkeys(sl.device for sl in pool.slots))
        n, noun, size = self.path.processes(plan), self.path.noun, self.path.size
        gpus = [d for d in devices if d != "cpu"]
        if gpus and len(gpus) < n:
            raise OSError(f"{self.path.name}={size} needs {n} GPUs, one per {noun}; this "
                          f"session has {len(gpus)} ({', '.join(gpus)}): --compile-cache-gpus")
        wanted = gpus[:n] if gpus else ["cpu"]
        with contextlib.ExitStack() as stack:
            held = [stack.enter_context(pool.lease(
                f"{self.item.nodeid} [{plan.name}, {noun} {r}]", device=d))
                for r, d in enumerate(wanted)]
            yield held

    @contextlib.contextmanager
    def lease(self, phase: str, env: Dict[str, str], spec: PhaseSpec, spec_path: Any
              ) -> Iterator[Any]:
        """A process's slot, held for the whole phase (`_leases`), and its GPU: every
        process sees the phase's GPUs and runs on cuda:<its index> (`index`), or sees
        only its own, as cuda:0 (`pinned`): the path's layout, else the session's."""
        import json

        r = int(spec["rank"])
        lease = self._held[r % len(self._held)]
        gpus = [h.slot.device for h in self._held if h.slot.device != "cpu"]
        if gpus and (self.path.layout or self.settings.rank_layout) == "pinned":
            env.update(lease.slot.env())
        elif gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
            spec["cuda_index"] = r
        spec_path.write_text(json.dumps(spec))
        yield lease


_FRESH = re.compile(r"^the (\S+)\.r\d+ phase ran in a fresh interpreter")


def fresh_notes(notes: List[str], who: str = "rank") -> List[str]:
    """The ranks (replicas) that ran in a fresh interpreter, one note: a phase's
    processes start at once, and a check's preloaded interpreter serves one of them."""
    matches = [m for m in map(_FRESH.match, notes) if m]
    if not matches:
        return notes
    fresh = {m.string for m in matches}
    phases = ", ".join(dict.fromkeys(m.group(1) for m in matches))
    return [n for n in notes if n not in fresh] + [
        f"{len(fresh)} {who} phase(s) ({phases}) ran in a fresh interpreter, not forked from "
        f"a preloaded one: the {who}s of a phase start at once, and a check's preloaded "
        f"interpreter serves one of them"]
