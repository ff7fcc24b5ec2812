"""The controller's orchestration with no process: `CheckRun` and the session drive
recorded phases through `fakes.ReplayLauncher`, which writes each phase's record
(tests/data/records/) where the child would. What runs is the controller's own code:
the phase plan of each warm-start path, `phase_outcome`, the check that the cold run's
files are intact when the warm run starts, the repeat run, the drift verdict against a
baseline's key manifest, and the rule that a problem the session adds fails a check
its judge passed. A few milliseconds a check.
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest

from fakes import RECORDS, ReplayLauncher, Reply, load_record, remove_files
from pytest_compilecache.controller.check import CheckRun
from pytest_compilecache.controller.session import CompileCacheSession
from pytest_compilecache.history import manifest as mf
from pytest_compilecache.history.store import ManifestStore
from pytest_compilecache.layers import LAYERS
from pytest_compilecache.model import CheckResult
from pytest_compilecache.options import Settings

DAMAGE = "cache damaged between build and deploy"
# what the recorded sessions' conftests did between the phases (records/record.py)
BETWEEN: Dict[str, Callable[[Path], Any]] = {
    "fx_entry_deleted": lambda root: remove_files(root, lambda p: p.startswith("inductor/fxgraph/")),
    "kernels_deleted": lambda root: remove_files(
        root, lambda p: p.startswith("inductor/") and p.endswith(".so")),
}


class Item:
    """What a CheckRun needs of its pytest item: the node id, the test file, and the
    hook it calls between the phases (`between(cache_root)`, as a conftest's
    pytest_compilecache_between_phases)."""

    def __init__(self, nodeid: str, path: Path,
                 between: Optional[Callable[[Path], Any]] = None) -> None:
        self.nodeid, self.path = nodeid, path
        self.between_called: List[Path] = []

        def hook(item: Any, cache_root: Path) -> None:
            self.between_called.append(cache_root)
            if between is not None:
                between(cache_root)

        self.ihook = SimpleNamespace(pytest_compilecache_between_phases=hook)


class Harness:
    """A controller session (the real `CompileCacheSession`, its launcher the replay)
    over private dirs; `check()` runs one record through one warm-start path."""

    def __init__(self, config: pytest.Config, tmp: Path) -> None:
        self.config, self.tmp = config, tmp
        self.session: Optional[CompileCacheSession] = None
        self.item: Optional[Item] = None

    def settings(self, **kw: Any) -> Settings:
        base = Settings(check=True, root=str(self.tmp / "roots"), store="none", device="cpu",
                        threads=1, launcher="subprocess", lease_timeout=5.0)
        return dataclasses.replace(base, **kw)

    def start(self, launcher: ReplayLauncher, **settings: Any) -> CompileCacheSession:
        session = CompileCacheSession(self.config, self.settings(**settings), launcher=launcher)
        for name in ("locks", "pch"):
            (self.tmp / name).mkdir(mode=0o700, exist_ok=True)
        session.lock_path, session.pch_path = str(self.tmp / "locks"), str(self.tmp / "pch")
        self.session = session
        return session

    def check(self, rec: Dict[str, Any], replies: Optional[Dict[str, Any]] = None,
              between: Optional[Callable[[Path], Any]] = None, via: Optional[str] = None,
              stands_for: Optional[Dict[str, str]] = None, baseline: Any = None,
              **settings: Any) -> CheckResult:
        launcher = ReplayLauncher(rec, replies, stands_for)
        if via is not None:
            settings.setdefault("via", (via,))
        session = self.start(launcher, **settings)
        if baseline is not None:
            session.history._baseline = baseline
        [path] = session.warm_start_paths
        self.path = path
        self.launcher = launcher
        self.item = Item(rec["nodeid"], self.tmp / rec["nodeid"].split("::")[0], between)
        self.run = CheckRun(session, self.item, path)  # type: ignore[arg-type]
        return self.run.run()


@pytest.fixture
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Harness:
    return Harness(request.config, tmp_path)


def _states(res: CheckResult) -> Dict[str, str]:
    return {k: v.state for k, v in res.layers.items()}


def _unplaced(notes: List[str]) -> List[str]:
    return [n for n in notes if "/compilecache-" not in n]


# -- a replayed check concludes as its session did ---------------------------------------

# every record but the shared cache's (its phase takes a turn over the cache the
# variants share, which the session builds from the collected variants)
REPLAYED = sorted(p.stem for p in RECORDS.glob("*.json")
                  if json.loads(p.read_text())["via"] != "shared")


@pytest.mark.parametrize("case", REPLAYED)
def test_a_replayed_check_concludes_as_its_session_did(harness: Harness, case: str) -> None:
    """The whole controller side, the session's own problems included (a damaged cache:
    its conftest's deletion between the phases replayed), gives what the session
    reported: verdict, problems, layers, outputs, notes."""
    rec = load_record(case)
    exp = rec["expected"]
    res = harness.check(rec, between=BETWEEN.get(case), via=rec["via"])
    assert (res.verdict, res.problems) == (exp["verdict"], exp["problems"]), res.error
    assert res.via == rec["via"]
    assert set(res.layers) == set(LAYERS)
    for name, lv in res.layers.items():
        want = exp["layers"][name]
        assert (name, lv.state, lv.cold, lv.warm, lv.reasons) == \
            (name, want["state"], want["cold"], want["warm"], want["reasons"])
    assert res.dynamo == exp["dynamo"]
    # but the kept roots, which name the session's temporary dirs
    assert _unplaced(res.notes) == _unplaced(exp["notes"])
    # the phases the path plans, each launched once, in their order
    assert harness.launcher.phases() == [p.name for p in harness.path.phases]
    # every timing the session derived from the processes is the recorded one
    assert {k: v for k, v in res.timings.items() if k in rec["timings"]} == rec["timings"]
