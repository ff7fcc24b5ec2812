"""A check's phases and the compile caches kept in the store (history/cachestore.py): a
phase taken from what a session at the baseline kept instead of being run
(`PhasePlan.from_store`, the deploy scenario's cold phase), and a passing check's root
kept for later commits (--compile-cache-store-caches). The controller's rules around
the store's copy; the copying and its checks are the store's."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Tuple

from pytest_compilecache import jsonfile
from pytest_compilecache.controller import diskspace
from pytest_compilecache.history import manifest as mf
from pytest_compilecache.isolation import CacheRoot
from pytest_compilecache.model import CheckResult, error_result
from pytest_compilecache.wire import PhaseRecord


def find(run: Any, root: CacheRoot) -> Tuple[Any, CacheRoot]:
    """The caches a session at the baseline kept for this check (or None: the baseline
    compiles in a worktree), and the root to restore them into: the check's root, moved
    to the path of the root they were compiled in. Inductor's cache entries name their
    Triton kernels by absolute path and look their tuning results up beside them: a warm
    run over a copy elsewhere tunes again and writes those results under the old path,
    outside its root (plugin-free, H100, torch 2.11, resnet18 training: 31 kernels tuned
    again and 31 files written under the gone path; 0 over the copy at that path). Where
    that path cannot be had, `run.notes` says why and the baseline compiles in a worktree."""
    saved = run.session.history.saved_caches(run.item.nodeid, run.notes)
    if saved is None:
        return None, root
    label = run.session.baseline().label
    if saved.root is None:
        run.notes.append(f"the caches kept for {label} ({saved.path}) do not say where they "
                         f"were compiled (kept by an older version); compiled {label} in a "
                         f"worktree instead")
        return None, root
    try:
        moved = CacheRoot.create_at(Path(saved.root))
    except OSError as e:
        run.notes.append(f"the caches kept for {label} can run as they did only at the path "
                         f"they were compiled in, {saved.root}, which is not to be had here "
                         f"({e.strerror or e}); compiled {label} in a worktree instead")
        return None, root
    run.roots[run.roots.index(root)] = moved  # first: an interrupt removes what it holds
    root.remove()  # made empty for this check, never used
    return saved, moved


def restored(run: Any, saved: Any, where: CacheRoot, phase: str
             ) -> Tuple[Optional[PhaseRecord], Optional[CheckResult]]:
    """The phase as the session at the baseline ran it: its caches copied into this
    check's root, its record read (bounded and validated, as a phase's own) from there.
    `run`: the CheckRun."""
    try:
        saved.restore(where.watched, where.phases)
        raw = jsonfile.load(where.phases / f"{phase}.json")
        if not isinstance(raw, dict) or not raw:
            raise ValueError(f"a JSON {type(raw).__name__}, not a phase record")
        rec = PhaseRecord.from_json(raw)
    except (OSError, ValueError, TypeError) as e:
        return None, error_result(run.item.nodeid, phase, f"could not be restored from the "
                                  f"saved caches {saved.path} ({e})", "", run.timings)
    run.timings[f"{phase}_s"] = rec.cache.wall_s  # the saved run's, on its machine
    run.launches[phase] = "stored"
    run.notes.append(f"the {phase} phase is the one a session at "
                     f"{run.session.baseline().label} kept in the store with its caches "
                     f"({saved.path}: {saved.files} files, {saved.size / 2 ** 20:.1f} MiB), "
                     f"not compiled again in a worktree; restored at the path it was "
                     f"compiled in, {where.path}")
    return rec, None


def other_environment(saved_env: str, rec: PhaseRecord) -> Optional[str]:
    """Why a phase that ran over restored caches ran in another environment than the
    one that saved them (another torch, GPU or Python: their entries are not this one's
    to judge), or None."""
    mine = mf.environment_id(mf.environment_of(rec.raw))
    if mine == saved_env:
        return None
    return (f"ran over caches saved in another environment ({saved_env}; this machine is "
            f"{mine}): keep the baseline's caches from a run in this environment "
            f"(--compile-cache-store-caches), or remove them from the store to compile the "
            f"baseline in a worktree")


def keep(run: Any, cold: PhaseRecord, result: CheckResult) -> None:
    """--compile-cache-store-caches: the passing check's root, kept for the deploy
    scenario of later commits. A store that cannot take it is this check's error: the
    run that was to leave caches for the commits after it left none."""
    from pytest_compilecache.history.cachestore import Unusable

    history = run.session.history
    try:
        kept = history.keep_caches(run.item.nodeid, cold.raw, run.roots[0])
    except Unusable as e:  # too large for any restore: not kept, and said
        result.notes.append(f"its caches are not kept in the store: {e}")
        return
    except OSError as e:
        result.problems.append(diskspace.write_problem(
            "the compile caches kept for later commits", history.store_path, e)
            + " (the check itself passed)")
        result.fault = True
        result.finalize()
        return
    result.notes.append(f"its caches are kept in the store for the deploy scenario of later "
                        f"commits: {kept}" if kept else
                        "its caches are not kept in the store: the work tree is dirty or not a "
                        "git repository (such caches are no commit's)")
