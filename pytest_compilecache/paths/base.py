"""A warm-start path, both its sides in one class: what the controller plans and judges
(the phases, their environment, the rule over their records) and what the phase child
does for it (load before the workload, compile, save after). The base's child side is
the local restart's: the cache directories themselves are what the warm process starts
from, so nothing is loaded or saved.

The controller side imports no torch; the child side imports it inside its methods
(the child has it loaded by then). Every child method records into `info`, the phase's
"artifact" record: an `error` there is the path's failure (the artifact is missing or
unreadable), never the model's.
"""
from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

from pytest_compilecache import files as fs
from pytest_compilecache.model import CheckResult
from pytest_compilecache.wire import PhaseRecord, RecordLike
from pytest_compilecache.pathoption import PathOption

# phase name -> what its child recorded: as the controller read it (JSON) or typed
Records = Mapping[str, RecordLike]
Phases = Dict[str, PhaseRecord]         # the same, typed (wire.phase_records)
Snapshots = Dict[str, fs.Snapshot]      # phase name -> the cache root's files after it
Info = Dict[str, Any]                   # a phase's "artifact" record


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
    other_gpu: bool = False  # runs on the GPU after the cold phase's
    #                          (--compile-cache-warm-on-other-gpu; one GPU: the same)
    from_store: bool = False  # taken from the caches a session at the baseline kept in
    #                           the store (history/cachestore.py) where it holds them, the
    #                           phase's record and outputs with them; else run
    shared_root: bool = False  # the cache root the variants of the test function share
    #                            (controller/variants.py), taken in turns; skipped for a
    #                            test with no other variant in the session
    python_seed: Optional[int] = None  # Python's random and numpy's from this seed, not the
    #                                    check's (child/replay.py); run only where an earlier
    #                                    phase drew from them, and compares no outputs
    fleet: bool = False  # runs as the path's N processes started together (a fleet path's
    #                      `size`, paths/fleet.py), each its own record; else one process
    process_group: bool = False  # those N form one process group (torchrun's ranks), else
    #                              N independent processes (replicas)

    @property
    def starts_warm(self) -> bool:
        """It starts from what the first phase built (its root, or the artifact it
        saved), so it compiles less than that phase did (controller/limits.py)."""
        return not self.shared_root and not self.at_baseline and (
            not self.fresh_root or self.artifact == "load")


class WarmStartPath:
    """A plan of phases, the rule that judges them, and the child's part in each phase.
    A subclass is one path; `name` is its registry key, `via` the path its results are
    reported under (the --compile-cache-via value), `summary` its line in --help."""
    name = ""
    via = "local"
    summary = ""
    selectable = True  # offered by --compile-cache-via (deploy and record are not)
    phases: Tuple[PhasePlan, ...] = ()
    # the first phase's keys go to the manifest store, the repeat run and the baseline
    # comparison (not when that phase ran another commit's code)
    records_keys = True
    artifact_file = "artifact.bin"  # what a phase saves for the next, in phases/
    # a passing check's root is what a restart of this commit starts from: kept in the
    # store with --compile-cache-store-caches (the local restart's; not a path whose
    # directories hold another commit's caches or an artifact's unpacking)
    storable = False
    # its rule reads the outputs (compiled vs eager vs float64, warm vs cold): where it
    # does not (a recording of keys), the child makes no reference run at all
    compares_outputs = True
    # its cold phase stops once the keys are computed, before code generation: a drift
    # against a manifest it recorded is confirmed by a recording in full (keyhistory.py)
    keys_only = False
    # it times nothing and has no verdict (a recording of keys): in a session whose every
    # path does, the checks' phases run side by side, a slot each (controller/ahead.py)
    runs_ahead = False
    # a failing check's cache roots are kept for inspection (the cold run's files, its
    # log); a recording of keys fails only on the drift its report names, which its root
    # adds nothing to (an error keeps it: its log)
    keeps_failed_roots = True
    # how its phases planned on another GPU see the GPUs (PhasePlan.other_gpu; the
    # other_gpu path's index | pinned, controller/lease.py)
    gpu_layout = ""
    # its warm run's misses may be a key change the repository accepts
    # (compilecache-accepted.json, history/accepted_drift.py): the deploy's
    accepts_drift = False
    # options of its own (--compile-cache-<name>, ini compile_cache_<name>), registered
    # when the plugin (a built-in path) or the conftest that returns the path loads;
    # `from_settings` reads them with `settings.path_option(name)`
    options: Tuple[PathOption, ...] = ()
    # The child's side writes what it observed into `info` (the phase's "artifact"
    # record); a section of its own (`info[name]`) reaches the controller's side as
    # `ArtifactRecord.raw[name]`, for the path to type (paths/remote.py: RemoteStats).

    # -- the controller's side (no torch) --

    @classmethod
    def from_settings(cls, settings: Any) -> "WarmStartPath":
        return cls()

    def preflight(self) -> List[str]:
        """What this path needs from outside the checks (a server, a client package),
        checked before anything compiles: one line per problem, naming the fix; the
        session stops with a usage error."""
        return []

    def judge(self, nodeid: str, recs: Records, snaps: Snapshots,
              timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        raise NotImplementedError

    def phase_env(self, plan: PhasePlan) -> Dict[str, str]:
        """What this path sets in a phase's environment (before the phase runs)."""
        return dict(plan.env)

    def close(self) -> None:
        """The session ends: stop what this path started."""

    def goes_on(self, rec: RecordLike) -> bool:
        """After a phase that ran: whether the next phase runs."""
        return True

    def failed(self, phase: str, rec: RecordLike, result: CheckResult) -> CheckResult:
        """A phase failed (`result` is its error): the path may say what that means."""
        return result

    # -- the phase child's side (torch imported inside) --

    def not_applicable(self, form: str, case: Any) -> Optional[str]:
        """Why this path cannot check this workload on this torch, or None."""
        return None

    def before(self, phase: str, path: Path, info: Info) -> None:
        """Before the workload: the warm process loads the artifact."""

    def compile(self, phase: str, path: Path, compile_fn: Callable[..., Any], model: Any,
                case: Any, kwargs: Dict[str, Any], inputs: Any, ckw: Dict[str, Any],
                info: Info) -> Callable[..., Any]:
        """The callable a ModelCase's workload runs."""
        return compile_fn(model, **{**case.compile_kwargs, **kwargs})

    def after(self, phase: str, path: Path, info: Info) -> None:
        """After the workload: the cold process saves the artifact."""

    @contextlib.contextmanager
    def watching(self, info: Info, device: str) -> Iterator[None]:
        """Around the workload and the save: what torch says about this path."""
        yield


class PathUnavailable(Exception):
    """What a path needs from outside the check is gone (the remote path's Redis server
    stopped answering): raised by `phase_env`, the check is an `error` naming it and the
    phase does not run. Running it would turn the outage into cache misses, a verdict on
    the model."""


class ArtifactFailed(Exception):
    """The warm process has nothing it can load: the path failed, not the model."""


class NotApplicable(Exception):
    """The workload cannot take this path (aot without a full graph, a model torch.export
    cannot trace): the check says `n/a` with the reason, never pass."""


def one_line(e: BaseException) -> str:
    """The exception's message on one line (torch's run over several)."""
    text = " ".join(x.strip() for x in str(e).splitlines() if x.strip())
    return f"{type(e).__name__}: {text}"[:700]


def last_exception(traceback_text: str) -> str:
    """The final exception of a formatted traceback, its message on one line."""
    lines = traceback_text.rstrip().splitlines()
    start = max((i for i, x in enumerate(lines) if _EXC_LINE.match(x)), default=len(lines) - 1)
    return " ".join(x.strip() for x in lines[start:] if x.strip())[:700]


_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*: ")
