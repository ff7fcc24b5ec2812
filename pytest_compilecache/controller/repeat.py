"""--compile-cache-repeat: a second cold compile of the same commit in a relocated cache
root and working directory; any cache-key difference is nondeterminism, a problem of
the check (every restart would miss)."""
from __future__ import annotations

from typing import Any, Dict

from pytest_compilecache.history import manifest as mf
from pytest_compilecache.isolation import CacheRoot
from pytest_compilecache.judge import confinement
from pytest_compilecache.model import CheckResult


def repeat_cold(run: Any, entry: Dict[str, Any], result: CheckResult) -> None:
    """A second cold run, relocated: same commit, so any key difference is nondeterminism."""
    run.phase_now = "repeat"
    root = CacheRoot.create(run.item.nodeid + "-repeat", run.settings.root)
    cwd = root.path / "cwd"
    cwd.mkdir(mode=0o700)
    try:
        rec, failure = run.run_phase(root, "repeat", cwd=cwd)
        hits = confinement.foreign_hits(rec) if rec is not None and failure is None else []
        if failure is not None or rec is None or hits:
            result.problems.append(f"repeat cold run: {failure.error}" if failure is not None
                                   else "repeat cold run " + confinement.not_cold(hits))
            return
        again = mf.check_entry(rec.raw.get("cache") or {}, result.verdict)
        cmp = mf.compare_check(entry, again)
        same = cmp["status"] in ("unchanged", "no keys")
        result.repeat = {"status": "stable" if same else "nondeterministic",
                         "graphs": cmp["graphs"]}
        if not same:
            comps = mf.changed_components(cmp)
            result.problems.append("nondeterministic cache key: two cold runs of the same "
                                   "commit computed different keys; differing: "
                                   + ", ".join(comps[:8]))
    finally:
        if not run.settings.keep:
            root.remove()
