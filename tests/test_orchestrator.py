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
from typing import Any, Callable, Dict, List, Optional, Sequence

import pytest

from fakes import (MARKED, RECORDS, ReplayLauncher, Reply, SessionReplay, UseLauncher,
                   load_record, remove_files)
from pytest_compilecache import layers
from pytest_compilecache.controller.check import CheckRun
from pytest_compilecache.controller.session import CompileCacheSession
from pytest_compilecache.history import manifest as mf
from pytest_compilecache.history.store import ManifestStore
from pytest_compilecache.model import CheckResult
from pytest_compilecache.settings import Settings
from pytest_compilecache.paths.redis_server import RedisServer, RedisUnavailable

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
                 between: Optional[Callable[[Path], Any]] = None,
                 markers: Sequence[Any] = ()) -> None:
        self.nodeid, self.path = nodeid, path
        self.location = (nodeid.split("::")[0], 16, nodeid.split("::")[-1])
        self.markers = {m.name: m for m in markers}
        self.between_called: List[Path] = []

        def hook(item: Any, cache_root: Path) -> None:
            self.between_called.append(cache_root)
            if between is not None:
                between(cache_root)

        self.ihook = SimpleNamespace(pytest_compilecache_between_phases=hook)

    def get_closest_marker(self, name: str) -> Any:
        return self.markers.get(name)


class Harness:
    """A controller session (the real `CompileCacheSession`, its launcher the replay)
    over private dirs; `check()` runs one record through one warm-start path."""

    def __init__(self, config: pytest.Config, tmp: Path) -> None:
        self.config, self.tmp = config, tmp
        self.session: Optional[CompileCacheSession] = None
        self.item: Optional[Item] = None

    def settings(self, **kw: Any) -> Settings:
        base = Settings(check=True, root=str(self.tmp / "roots"), store="none", device="cpu",
                        threads=1, launcher="fresh", lease_timeout=5.0)
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
              stands_for: Optional[Dict[str, str]] = None, base: Any = None,
              markers: Sequence[Any] = (), **settings: Any) -> CheckResult:
        launcher = ReplayLauncher(rec, replies, stands_for)
        if via is not None:
            settings.setdefault("via", (via,))
        if base is not None:
            settings.setdefault("baseline", base.rev)
        session = self.start(launcher, **settings)
        if base is not None:  # the baseline: its keys and its worktree (history/baseline.py)
            session.history._baseline = base
        [path] = session.warm_start_paths
        self.path = path
        self.launcher = launcher
        self.item = Item(rec["nodeid"], self.tmp / rec["nodeid"].split("::")[0], between,
                         markers)
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
    assert set(res.layers) == set(layers.LAYERS) and set(exp["layers"]) <= set(res.layers)
    for name, want in exp["layers"].items():
        lv = res.layers[name]
        assert (name, lv.state, lv.cold, lv.warm, lv.reasons) == \
            (name, want["state"], want["cold"], want["warm"], want["reasons"])
    assert res.dynamo == exp["dynamo"]
    # but the kept roots, which name the session's temporary dirs
    assert _unplaced(res.notes) == _unplaced(exp["notes"])
    # the phases the path plans, each launched once, in their order; a carried path's
    # warm phase on an empty root of its own (the reseeded restart only where the test
    # drew from Python's random or numpy's: none of these recorded tests did)
    planned = [p for p in harness.path.phases if p.python_seed is None]
    assert harness.launcher.phases() == [p.name for p in planned]
    roots = [x.spec["root"] for x in harness.launcher.launched]
    assert [r != roots[0] for r in roots] == [p.fresh_root for p in planned]
    # every timing the session derived from the processes is the recorded one
    assert {k: v for k, v in res.timings.items() if k in rec["timings"]} == rec["timings"]


def test_the_phases_run_in_the_checks_private_root_and_the_between_hook_sees_the_cold_files(
        harness: Harness) -> None:
    """Cold then warm over one private root (the local restart); the hook between them
    is handed that root holding what the cold run wrote; a passing check's roots go."""
    rec = load_record("pass_mlp")
    seen: List[Dict[str, int]] = []

    def between(root: Path) -> None:
        seen.append({p: (root / p).stat().st_size for p in rec["snaps"]["cold"]})

    res = harness.check(rec, between=between)
    cold, warm = harness.launcher.launched
    assert (cold.spec["root"], cold.lane, warm.lane) == (warm.spec["root"], 0, 1)
    root = Path(cold.spec["root"])
    assert cold.spec["out"] == str(root / "phases" / "cold.json")
    assert cold.env["TORCHINDUCTOR_CACHE_DIR"] == str(root / "inductor")
    assert harness.item is not None and harness.item.between_called == [root]
    assert seen == [rec["snaps"]["cold"]]
    assert res.verdict == "pass" and res.cache_root is None and not root.exists()
    assert res.launch == {"cold": "fresh", "warm": "fresh"}
    assert [x["phase"] for x in res.leases] == ["cold", "warm"]


def test_a_failing_check_keeps_its_root_and_names_it(harness: Harness) -> None:
    res = harness.check(load_record("fx_config_drift"))
    assert res.verdict == "fail"
    assert res.cache_root is not None
    assert res.cache_root == harness.launcher.launched[0].spec["root"]
    assert (Path(res.cache_root) / "phases" / "warm.json").is_file()


# -- phase_outcome: what a phase process amounts to --------------------------------------

def _warm_error(harness: Harness, reply: Reply, case: str = "pass_mlp", **kw: Any
                ) -> CheckResult:
    res = harness.check(load_record(case), replies={"warm": reply}, **kw)
    assert res.verdict == "error", (res.verdict, res.problems)
    assert res.error is not None
    return res


def test_a_phase_that_timed_out_is_an_error_naming_the_timeout(harness: Harness) -> None:
    res = _warm_error(harness, Reply(record=None, returncode=None, timed_out=True,
                                     log="compiling...\nstill compiling"), timeout=42.0)
    assert res.error == ("warm phase timed out after 42 s and was killed with its process "
                         "group (raise --compile-cache-timeout)\n--- last lines of its output "
                         "---\ncompiling...\nstill compiling")
    assert res.timings["warm_process_s"] == load_record("pass_mlp")["timings"]["warm_process_s"]
    assert harness.launcher.launched[1].timeout == 42.0


def test_without_the_option_a_later_phase_gets_a_multiple_of_the_first(harness: Harness
                                                                        ) -> None:
    """Issue 38: a hung warm phase ends after 4x the cold phase's seconds (at least 300 s),
    not after the cold compile's 1800 s, and says whose limit it hit."""
    res = _warm_error(harness, Reply(record=None, returncode=None, timed_out=True,
                                     log="compiling..."))
    cold, warm = harness.launcher.launched[:2]
    assert cold.timeout == 1800.0 and warm.timeout == 300.0
    assert warm.spec["timeout_s"] == 300.0  # the child dumps its stack before that
    assert res.error.startswith("warm phase timed out after 300 s and was killed with its "
                                "process group (the default after the cold phase: 4x its ")


def test_an_accepted_cost_passes_the_check_and_says_who_accepted_it(harness: Harness) -> None:
    """Issue 38: the PGO recompile of a varying batch without a job id, accepted by the
    session's option or by the check's marker (its place and reason named)."""
    rec = load_record("pgo_no_job_id")
    assert harness.check(rec).verdict == "fail"
    res = harness.check(rec, accept=("dynamo_pgo",))
    assert res.verdict == "pass" and res.problems == []
    assert res.layers["dynamo_pgo"].accepted == "--compile-cache-accept"
    marker = pytest.mark.compile_cache_accept("dynamo_pgo", reason="no PGO in production").mark
    res = harness.check(rec, markers=[marker])
    assert res.verdict == "pass"
    assert res.layers["dynamo_pgo"].accepted == (
        "@pytest.mark.compile_cache_accept at pgo/test_serve.py:17 (no PGO in production)")


def test_a_phase_killed_without_a_record_is_named_a_likely_oom(harness: Harness) -> None:
    res = _warm_error(harness, Reply(record=None, returncode=-signal.SIGKILL))
    assert res.error is not None and res.error.startswith(
        "warm phase was killed with SIGKILL without a result: out of memory? (the kernel's "
        "OOM killer sends SIGKILL; peak resident memory 337 MB)")


def test_a_record_cut_short_is_the_phases_error_not_the_plugins(harness: Harness) -> None:
    """A phase killed while writing its record (issue 38): the phase's error naming the
    record, never `failed in the controller`."""
    res = _warm_error(harness, Reply(raw='{"cache": {"graphs": [', returncode=-9,
                                     log="Killed"))
    assert res.error is not None and res.error.startswith(
        "warm phase left a record that cannot be read ("), res.error
    assert "warm.json" in res.error and "failed in the controller" not in res.error
    res = _warm_error(harness, Reply(raw="[1, 2]"))
    assert "left a record that cannot be read (" in (res.error or "")
    assert "a JSON list, not a phase record" in (res.error or "")


def test_a_phase_that_exits_without_a_record_is_a_crash_with_its_log(harness: Harness) -> None:
    res = _warm_error(harness, Reply(record=None, returncode=3, log="Segmentation fault"))
    assert res.error == ("warm phase crashed or exited early (exit code 3) without a result "
                         "(peak resident memory 337 MB)\n--- last lines of its output ---\n"
                         "Segmentation fault")


def test_a_phase_whose_workload_raised_is_an_error_with_the_exception(harness: Harness) -> None:
    warm = load_record("pass_mlp")["recs"]["warm"]
    res = _warm_error(harness, Reply(record={**warm, "error": "RuntimeError: boom\n"},
                                     log="the log"))
    # the workload ran: its exception says it all, the log's tail is not added
    assert res.error == "warm phase failed:\nRuntimeError: boom"
    res = _warm_error(harness, Reply(record={**warm, "error": "MemoryError\n", "ran": False},
                                     log="the log"))
    assert res.error == ("warm phase ran out of memory (MemoryError; peak resident memory "
                         "337 MB):\nMemoryError\n--- last lines of its output ---\nthe log")


def test_a_phase_whose_caches_escaped_its_root_is_an_error(harness: Harness) -> None:
    from pytest_compilecache.judge import confinement

    warm = load_record("pass_mlp")["recs"]["warm"]
    escaped = ["TORCHINDUCTOR_CACHE_DIR was set to /elsewhere by the test's code"]
    res = _warm_error(harness, Reply(record={**warm, "escaped": escaped}))
    assert res.error == "warm phase " + confinement.escaped(escaped)


def test_what_a_phase_reclaimed_is_noted_once(harness: Harness) -> None:
    rec = load_record("pass_mlp")
    said = "the test's code set torch._inductor.config.fx_graph_cache=False: put back"
    for phase in ("cold", "warm"):
        rec["recs"][phase]["reclaimed"] = [said]
    res = harness.check(rec)
    assert res.verdict == "pass" and res.notes.count(said) == 1


def test_a_failed_cold_phase_runs_no_warm_phase(harness: Harness) -> None:
    res = harness.check(load_record("pass_mlp"), replies={"cold": Reply(record=None,
                                                                        returncode=1)})
    assert res.verdict == "error" and res.error is not None
    assert res.error.startswith("cold phase crashed or exited early (exit code 1)")
    assert harness.launcher.phases() == ["cold"]
    assert harness.item is not None and harness.item.between_called == []


def test_a_cold_phase_that_hit_was_never_cold(harness: Harness) -> None:
    """A cold phase on an empty root that loads entries it never wrote: an error, the
    warm phase is not run."""
    rec = load_record("pass_mlp")
    res = harness.check(rec, replies={"cold": Reply(record=rec["recs"]["warm"])})
    assert res.verdict == "error" and res.error is not None
    assert res.error.startswith("cold phase was not cold: it began on an empty private cache "
                                "root and still loaded cache entries (fx_graph hit 1 entr(ies) "
                                "this process never wrote")
    assert harness.launcher.phases() == ["cold"]


def test_a_phase_log_that_says_the_disk_filled_makes_a_failed_check_an_error(
        harness: Harness) -> None:
    rec = load_record("fx_config_drift")
    full = "OSError: [Errno 28] No space left on device: '/tmp/x/inductor/fxgraph/ab'"
    glog = "W1125 00:13:57.700000 7699 torch/_inductor/codecache.py:2193] "  # torch's prefix
    res = harness.check(rec, replies={"cold": Reply(record=rec["recs"]["cold"],
                                                    log=f"{glog}{full}\n")})
    assert res.verdict == "error"
    assert res.problems[0].startswith(f"the cold phase could not save all of its caches ({full}; "
                                      f"log: ")
    assert res.problems[1:] == rec["expected"]["problems"]
    # a check that passed is not blamed on the disk
    rec = load_record("pass_mlp")
    res = harness.check(rec, replies={"cold": Reply(record=rec["recs"]["cold"],
                                                    log=full + "\n")})
    assert res.verdict == "pass" and not res.problems


# -- damage: the cold run's files changed before the warm run read them ------------------

def test_a_damaged_cache_is_the_sessions_problem_and_fails_a_check_its_judge_passed(
        harness: Harness) -> None:
    """kernels_deleted: the warm run rebuilt every .so at the same path and size, so the
    judge passes; the damage the session saw between the phases fails the check."""
    rec = load_record("kernels_deleted")
    res = harness.check(rec, between=BETWEEN["kernels_deleted"])
    assert res.verdict == "fail"
    assert [p for p in res.problems if p.startswith(DAMAGE)] == res.problems
    assert "7 file(s)" in res.problems[0] and res.problems[0].endswith("(+2 more)")
    # the same phases, nothing deleted: no damage, and the judge's pass stands
    res = harness.check(load_record("kernels_deleted"))
    assert (res.verdict, res.problems) == ("pass", [])


def test_a_warm_crash_after_damage_fails_naming_the_damage_instead_of_an_error(
        harness: Harness) -> None:
    crash = Reply(record=None, returncode=1, log="ImportError: cannot load kernel .so")
    res = harness.check(load_record("kernels_deleted"), replies={"warm": crash},
                        between=BETWEEN["kernels_deleted"])
    assert res.verdict == "fail" and res.problems[0].startswith(DAMAGE)
    assert res.error is not None and "crashed or exited early" in res.error
    res = harness.check(load_record("kernels_deleted"), replies={"warm": crash})
    assert (res.verdict, res.problems) == ("error", [])


# -- the repeat run: a second cold run, relocated ------------------------------------------

def _rekeyed(cold: Dict[str, Any]) -> Dict[str, Any]:
    """`cold` as a cold run that computed another AOTAutograd key, its grad_enabled
    component changed (what a nondeterministic key component does)."""
    out = json.loads(json.dumps(cold))
    entry = out["cache"]["graphs"]["0/0"]["aot_autograd"][0]
    entry["key"] = "a" + entry["key"][1:]
    entry["components"] = [[n, "0" * len(h), "True"] if n == "grad_enabled" else [n, h, v]
                           for n, h, v in entry["components"]]
    return out


def test_a_repeat_run_with_the_same_keys_is_stable(harness: Harness) -> None:
    res = harness.check(load_record("pass_mlp"), repeat=True)
    assert (res.verdict, res.problems) == ("pass", [])
    assert res.repeat == {"status": "stable", "graphs": []}
    cold, _, repeat = harness.launcher.launched
    assert [x.phase for x in harness.launcher.launched] == ["cold", "warm", "repeat"]
    # relocated: its own root, run from another directory
    assert repeat.spec["root"] != cold.spec["root"]
    assert repeat.cwd == str(Path(repeat.spec["root"]) / "cwd")
    assert not Path(repeat.spec["root"]).exists()


def test_a_repeat_run_that_computes_other_keys_fails_a_passing_check(harness: Harness) -> None:
    rec = load_record("pass_mlp")
    res = harness.check(rec, repeat=True,
                        replies={"repeat": Reply(record=_rekeyed(rec["recs"]["cold"]))})
    assert res.verdict == "fail"
    assert res.problems == ["nondeterministic cache key: two cold runs of the same commit "
                            "computed different keys; differing: grad_enabled"]
    assert res.repeat["status"] == "nondeterministic"
    assert [g["graph"] for g in res.repeat["graphs"]] == ["aot_autograd:0/0"]


def test_a_repeat_run_that_failed_or_was_not_cold_is_a_problem(harness: Harness) -> None:
    rec = load_record("pass_mlp")
    res = harness.check(rec, repeat=True, replies={"repeat": Reply(record=None, returncode=2)})
    assert res.verdict == "fail" and len(res.problems) == 1
    assert res.problems[0].startswith("repeat cold run: repeat phase crashed or exited early "
                                      "(exit code 2)")
    res = harness.check(load_record("pass_mlp"), repeat=True,
                        replies={"repeat": Reply(record=rec["recs"]["warm"])})
    assert res.verdict == "fail" and len(res.problems) == 1
    assert res.problems[0].startswith("repeat cold run was not cold: ")


def test_an_artifact_path_records_no_keys_so_runs_no_repeat(harness: Harness) -> None:
    res = harness.check(load_record("mega_linear"), via="mega", repeat=True)
    assert res.verdict == "pass" and res.repeat == {}
    assert harness.launcher.phases() == ["cold", "warm"]


# -- the drift verdict against a baseline's key manifest ---------------------------------

class Baseline:
    """A baseline (history/baseline.py) whose manifest is already in the store: the keys a
    record's phase computed, written through a real ManifestStore. `tree` stands for
    the baseline's worktree (the deploy path runs its cold phase there)."""

    def __init__(self, tmp: Path, checks: Dict[str, Dict[str, Any]], env: Dict[str, Any],
                 fails: Optional[Exception] = None) -> None:
        self.store = ManifestStore(tmp / "store")
        self.commit = {"sha": "b" * 40, "short": "bbbbbbb", "subject": "the base"}
        self.rev = "v1"
        self.logs: List[Path] = []
        self.fails = fails
        self.path = self.store.merge(self.commit, env, checks) if checks else None
        self.env_id = mf.environment_id(env)
        self.asked: List[List[str]] = []
        self._tree = tmp / "baseline-tree"

    @property
    def label(self) -> str:
        return f'{self.rev} ({self.commit["short"]} "{self.commit["subject"]}")'

    def manifest(self, env: Dict[str, Any], nodeids: List[str]) -> Optional[Dict[str, Any]]:
        self.asked.append(list(nodeids))
        if self.fails is not None:
            raise self.fails
        assert mf.environment_id(env) == self.env_id  # the cold run's environment
        return self.store.read(self.env_id, self.commit["sha"])

    def tree(self) -> Path:
        return self._tree

    def close(self) -> None:
        pass

    def describe(self) -> Dict[str, Any]:
        return {"ref": self.rev, "label": self.label, "sha": self.commit["sha"]}


def _baseline(tmp: Path, rec: Dict[str, Any], phase: str = "cold",
              rekey: Optional[Callable[[Dict[str, Any]], Dict[str, Any]]] = None,
              **kw: Any) -> Baseline:
    """The baseline's keys: those `rec`'s `phase` computed (changed by `rekey`)."""
    cold = rec["recs"]["cold"]
    then = rec["recs"][phase] if rekey is None else rekey(rec["recs"][phase])
    checks = {rec["nodeid"]: mf.check_entry(then["cache"], "pass")} if phase else {}
    return Baseline(tmp, checks, mf.environment_of(cold), **kw)


def test_keys_equal_to_the_baselines_are_unchanged(harness: Harness, tmp_path: Path) -> None:
    rec = load_record("pass_mlp")
    base = _baseline(tmp_path, rec)
    res = harness.check(rec, base=base)
    assert (res.verdict, res.problems) == ("pass", [])
    assert res.drift == {"base": base.label, "base_sha": "b" * 40, "status": "unchanged",
                         "graphs": []}
    assert base.asked == [[rec["nodeid"]]]


def test_keys_that_drifted_from_the_baselines_fail_a_passing_check_naming_the_component(
        harness: Harness, tmp_path: Path) -> None:
    rec = load_record("pass_mlp")
    base = _baseline(tmp_path, rec, rekey=_rekeyed)
    res = harness.check(rec, base=base)
    assert res.verdict == "fail"
    [said] = res.problems
    assert said.startswith(f"cache keys drifted against {base.label}: grad_enabled; if the "
                           f"change is meant, accept it in the repository: "
                           f"`pytest-compilecache accept "), said
    assert said.endswith("` (writes compilecache-accepted.json: commit it with the change)")
    assert res.drift["status"] == "drifted"
    [g] = res.drift["graphs"]
    # the baseline's components were read back from the store's blobs
    assert g["components"] == [{"component": "grad_enabled", "old": "True", "new": "False",
                                "old_hash": "0" * 51,  # _rekeyed's
                                "new_hash": "esstihe2nyydk4mhzpvox3qkajyu5y5t23hk3fi2me7jn75xi3o"}]


def test_a_drift_the_session_allows_is_accepted(harness: Harness, tmp_path: Path) -> None:
    rec = load_record("pass_mlp")
    res = harness.check(rec, base=_baseline(tmp_path, rec, rekey=_rekeyed),
                        allow_drift=("grad_*",))
    assert (res.verdict, res.problems, res.drift["status"]) == ("pass", [], "accepted")


def test_the_recorded_config_drift_against_a_baseline_that_had_the_other_setting(
        harness: Harness, tmp_path: Path) -> None:
    """fx_config_drift: its warm run's keys (epilogue_fusion True) as the baseline's; the
    drift problem comes after the judge's."""
    rec = load_record("fx_config_drift")
    base = _baseline(tmp_path, rec, phase="warm")
    res = harness.check(rec, base=base)
    comp = "inductor_config[epilogue_fusion]"
    assert res.problems[:-1] == rec["expected"]["problems"]
    assert res.problems[-1].startswith(f"cache keys drifted against {base.label}: {comp}; if "
                                       f"the change is meant, accept it in the repository: ")
    changed = {c["component"]: (c["old"], c["new"]) for g in res.drift["graphs"]
               for c in g["components"]}
    assert changed[comp] == ("True", "False")


def test_a_check_the_baseline_lacks_is_new_there(harness: Harness, tmp_path: Path) -> None:
    rec = load_record("pass_mlp")
    base = Baseline(tmp_path, {"other.py::test_other": {"verdict": "pass", "graphs": {}}},
                    mf.environment_of(rec["recs"]["cold"]))
    res = harness.check(rec, base=base)
    assert (res.verdict, res.problems, res.drift["status"]) == ("pass", [], "new")
    assert f"no key manifest at the baseline {base.label}: the check is new there or its " \
           f"recording failed" in res.notes


def test_a_baseline_that_cannot_be_read_is_the_checks_problem(harness: Harness,
                                                            tmp_path: Path) -> None:
    rec = load_record("pass_mlp")
    base = _baseline(tmp_path, rec, fails=mf.BadManifest("/store/x.json", "truncated"))
    res = harness.check(rec, base=base)
    assert res.verdict == "fail" and len(res.problems) == 1
    assert res.problems[0].startswith("baseline v1: ") and "truncated" in res.problems[0]
    assert res.drift == {}


# -- the deploy path (--compile-cache-baseline-warm) -----------------------------------------

def _deploy_base(tmp: Path, rec: Dict[str, Any]) -> Baseline:
    base = _baseline(tmp, rec)
    test_file = base.tree() / rec["nodeid"].split("::")[0]
    test_file.parent.mkdir(parents=True)
    test_file.write_text("# the check's test file at the baseline\n")
    return base


def _fresh(rec: Dict[str, Any], compare: Optional[Dict[str, Any]]) -> Reply:
    """The deploy path's third phase: a cold compile of this commit's code on an empty
    root that compared its outputs with the warm run's (`compare_cold`)."""
    return Reply(record={**rec["recs"]["cold"], "compare_cold": compare})


def test_deploy_runs_the_cold_phase_in_the_baselines_worktree_then_a_fresh_reference(
        harness: Harness, tmp_path: Path) -> None:
    rec = load_record("pass_mlp")
    base = _deploy_base(tmp_path, rec)
    res = harness.check(rec, base=base, scenarios=(("deploy", True),),
                        replies={"fresh": _fresh(rec, rec["recs"]["warm"]["compare_cold"])})
    # reported as the local restart it stands for
    assert harness.path.name == "deploy" and res.via == "local"
    assert (res.verdict, res.problems) == ("pass", [])
    cold, warm, fresh = harness.launcher.launched
    assert [cold.phase, warm.phase, fresh.phase] == ["cold", "warm", "fresh"]
    tree = str(base.tree())
    assert cold.cwd == tree and cold.env["PYTHONPATH"].split(os.pathsep)[0] == tree
    assert warm.cwd != tree and fresh.cwd != tree
    # the warm run over the baseline's caches; the fresh one on an empty root of its own,
    # comparing with the outputs the warm run kept
    assert warm.spec["root"] == cold.spec["root"] != fresh.spec["root"]
    phases = Path(cold.spec["root"]) / "phases"
    assert warm.spec["save_outputs"] == str(phases / "warm-outputs.pt")
    assert fresh.spec["compare_outputs"] == str(phases / "warm-outputs.pt")
    assert any(n.startswith("a fresh compile of this commit's code on an empty cache, the "
                            "reference a stale entry cannot hide from, computed what the warm "
                            "run did (bitwise, else float64 reference: 1 compared)")
               for n in res.notes), res.notes
    # the cold keys are another commit's: not compared with the baseline's
    assert res.drift == {} and base.asked == []
    # the warm run is this commit's code and the fresh one a full compile: each may
    # compile longer than the baseline's cold one did, so each gets a compile's limit
    assert [c.timeout for c in harness.launcher.launched] == [1800.0, 1800.0, 1800.0]


def test_deploy_fails_a_warm_run_that_differs_from_the_fresh_compile(
        harness: Harness, tmp_path: Path) -> None:
    rec = load_record("pass_mlp")
    stale = load_record("stale_entry")["recs"]["warm"]["compare_cold"]
    res = harness.check(rec, base=_deploy_base(tmp_path, rec), scenarios=(("deploy", True),),
                        replies={"fresh": _fresh(rec, stale)})
    assert res.verdict == "fail" and len(res.problems) == 1
    assert res.problems[0].startswith(
        "outputs: the warm run (the baseline's caches under this commit's code) differs from "
        "a fresh compile of this commit's code in 1 tensor(s); first output: differs (max abs "
        "diff 1.32")
    assert res.outputs["fresh_vs_warm"]["ok"] is False


def test_deploy_without_a_fresh_comparison_fails(harness: Harness, tmp_path: Path) -> None:
    rec = load_record("pass_mlp")
    res = harness.check(rec, base=_deploy_base(tmp_path, rec), scenarios=(("deploy", True),))
    assert res.verdict == "fail"
    assert res.problems == ["outputs: the fresh compile of this commit's code made no "
                            "comparison with the warm run"]


def test_deploy_of_a_check_the_baseline_lacks_runs_nothing(harness: Harness,
                                                           tmp_path: Path) -> None:
    rec = load_record("pass_mlp")
    base = _baseline(tmp_path, rec)  # its worktree has no such test file
    res = harness.check(rec, base=base, scenarios=(("deploy", True),))
    assert res.verdict == "error" and harness.launcher.launched == []
    assert res.error == (f"cold phase does not exist at the baseline {base.label}: nothing to "
                         f"deploy from")


def test_deploy_from_a_baseline_that_cannot_be_checked_out_is_an_error(
        harness: Harness, tmp_path: Path) -> None:
    rec = load_record("pass_mlp")
    base = _baseline(tmp_path, rec)

    def tree() -> Path:
        raise RuntimeError("git worktree add failed: no such revision v1")

    base.tree = tree  # type: ignore[method-assign]
    res = harness.check(rec, base=base, scenarios=(("deploy", True),))
    assert (res.verdict, res.error) == ("error", "cold phase could not check out the baseline: "
                                                 "git worktree add failed: no such revision v1")
    assert harness.launcher.launched == []


# -- the remote path (--compile-cache-via=remote) ----------------------------------------------

class Redis(RedisServer):
    """A Redis server as the remote path sees it (paths/redis_server.py), with nothing
    listening: what it says (env, gone) is the real class's, what would ask the server
    is answered here. `down_before`: the phase before which it stops answering;
    `gone_after`: gone once the phases ran (DBSIZE gets no reply)."""

    def __init__(self, owned: bool = True, down_before: str = "",
                 gone_after: bool = False) -> None:
        super().__init__("127.0.0.1", 6399, None, Path("/srv/redis") if owned else None)
        self._owned, self.down_before, self.gone_after = owned, down_before, gone_after
        self.flushed, self.closed = 0, False
        self.asked: List[str] = []

    @property
    def owned(self) -> bool:
        return self._owned

    def flush(self) -> None:
        self.flushed += 1

    def ensure_answers(self, when: str) -> None:
        self.asked.append(when)
        if self.down_before and when.endswith(f"before the {self.down_before} phase"):
            raise RedisUnavailable(self.gone("connection refused", when))

    def keys(self) -> Optional[int]:
        return None if self.gone_after else 3

    def close(self) -> None:
        self.closed = True


def _remote(rec: Dict[str, Any], cold: Dict[str, Dict[str, int]],
            warm: Dict[str, Dict[str, int]]) -> Dict[str, Any]:
    """A carried path's record with what torch's remote caches counted in each process."""
    out = json.loads(json.dumps(rec))
    for phase, stats in (("cold", cold), ("warm", warm)):
        out["recs"][phase]["artifact"]["remote"] = {
            name: {"hit": 0, "miss": 0, "put": 0, "exception": 0, **s} for name, s in stats.items()}
    return out


def _remote_check(harness: Harness, rec: Dict[str, Any], server: Redis, **kw: Any
                  ) -> CheckResult:
    launcher = ReplayLauncher(rec, kw.pop("replies", None))
    session = harness.start(launcher, via=("remote",), **kw)
    [path] = session.warm_start_paths
    path.server = server  # type: ignore[attr-defined]
    harness.launcher, harness.path = launcher, path
    item = Item(rec["nodeid"], harness.tmp / "t.py")
    return CheckRun(session, item, path).run()  # type: ignore[arg-type]


FX_REMOTE = "RemoteFxGraphCache"


def test_remote_warm_hits_through_the_server_and_passes(harness: Harness) -> None:
    rec = _remote(load_record("mega_linear"), {FX_REMOTE: {"put": 1}},
                  {FX_REMOTE: {"hit": 1}, "LocalFxGraphCache": {"miss": 1}})
    server = Redis()
    res = _remote_check(harness, rec, server)
    assert (res.verdict, res.problems, res.via) == ("pass", [], "remote")
    assert "remote fx_graph (RemoteFxGraphCache): cold put 1; warm hit 1, miss 0 (its empty " \
           "local disk: miss 1)" in res.notes
    assert res.notes[-1] == "remote: a private redis-server at 127.0.0.1:6399; the cold " \
                            "process put RemoteFxGraphCache 1"
    # emptied before the cold phase only; asked to answer before each phase
    assert server.flushed == 1
    assert server.asked == ["before the check's cold phase",
                            "after the cold phase, before the warm phase"]
    for launched in harness.launcher.launched:
        assert launched.env["TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE"] == "1"
        assert launched.env["TORCHINDUCTOR_REDIS_PORT"] == "6399"
    cold, warm = harness.launcher.launched
    assert cold.spec["root"] != warm.spec["root"]  # a new machine with an empty disk


def test_remote_warm_misses_of_what_cold_put_fail(harness: Harness) -> None:
    rec = _remote(load_record("mega_linear"), {FX_REMOTE: {"put": 1}}, {FX_REMOTE: {"miss": 2}})
    res = _remote_check(harness, rec, Redis())
    assert res.verdict == "fail"
    assert res.problems == ["remote fx_graph: the warm process missed RemoteFxGraphCache 2 "
                            "time(s) and hit it never, though the cold one put 1 entr(ies)"]


def test_remote_server_gone_during_the_warm_phase_makes_the_check_an_error(
        harness: Harness) -> None:
    rec = _remote(load_record("mega_linear"), {FX_REMOTE: {"put": 1}}, {FX_REMOTE: {"miss": 2}})
    res = _remote_check(harness, rec, Redis(gone_after=True))
    assert res.verdict == "error"
    assert res.problems[0] == (
        "remote: the plugin's private redis-server at 127.0.0.1:6399 stopped answering during "
        "the warm phase (DBSIZE got no reply): a fault of the server, not a verdict on the "
        "model; see its log in /srv/redis/redis.log; the remote caches were unreachable, so "
        "what follows is its consequence")


def test_remote_server_down_before_the_warm_phase_runs_no_warm_phase(harness: Harness) -> None:
    rec = _remote(load_record("mega_linear"), {FX_REMOTE: {"put": 1}}, {FX_REMOTE: {"hit": 1}})
    res = _remote_check(harness, rec, Redis(down_before="warm"))
    assert res.verdict == "error" and harness.launcher.phases() == ["cold"]
    assert res.error is not None and res.error.startswith(
        "warm phase was not run: the plugin's private redis-server at 127.0.0.1:6399 stopped "
        "answering after the cold phase, before the warm phase (connection refused)")


def test_remote_cold_run_warmed_by_a_users_server_names_the_server(harness: Harness) -> None:
    rec = _remote(load_record("mega_linear"), {FX_REMOTE: {"put": 1}}, {FX_REMOTE: {"hit": 1}})
    warm_as_cold = Reply(record={**rec["recs"]["warm"], "artifact": rec["recs"]["cold"]["artifact"]})
    server = Redis(owned=False)
    res = _remote_check(harness, rec, server, path_options=(("redis", "127.0.0.1:6399"),),
                        replies={"cold": warm_as_cold})
    assert res.verdict == "error" and res.error is not None
    assert res.error.startswith("cold phase was not cold: ")
    assert res.error.endswith("; here the likely source is your Redis server at "
                              "127.0.0.1:6399: it holds entries of earlier runs (the check "
                              "empties only a server of its own: leave --compile-cache-redis "
                              "out)")
    assert server.flushed == 1  # asked; the real class flushes only a server of its own


# -- caching precompile (--compile-cache-via=precompile) -------------------------------------

def _precompiled(rec: Dict[str, Any], hits: int, traced: int,
                 said: Optional[List[str]] = None) -> Dict[str, Any]:
    """A mega-cache record as caching precompile's: the warm process loaded `hits`
    precompiled frames and traced `traced`; torch `said` these in the cold one."""
    out = json.loads(json.dumps(rec))
    counters = out["recs"]["warm"]["cache"]["counters"]
    counters["frames"] = {"ok": traced, "total": traced}
    counters["dynamo_cache"] = {"dynamo_cache_hit": hits}
    out["recs"]["cold"]["artifact"]["torch_said"] = list(said or [])
    return out


def test_precompile_sets_caching_precompile_in_both_processes_and_passes_a_loaded_frame(
        harness: Harness) -> None:
    rec = _precompiled(load_record("mega_linear"), hits=1, traced=0)
    res = harness.check(rec, via="precompile")
    assert (res.via, res.verdict, res.problems) == ("precompile", "pass", [])
    cold, warm = harness.launcher.launched
    assert cold.env["TORCH_CACHING_PRECOMPILE"] == warm.env["TORCH_CACHING_PRECOMPILE"] == "1"
    assert (cold.spec["artifact"], warm.spec["artifact"]) == ("save", "load")
    assert cold.spec["artifact_path"] == warm.spec["artifact_path"]  # carried between roots
    assert cold.spec["root"] != warm.spec["root"]


def test_precompile_fails_a_warm_process_that_traced(harness: Harness) -> None:
    said = ["caching_precompile: guard on a global dropped: G['scale']",
            "package bypass: the frame reads a closure cell"]
    rec = _precompiled(load_record("mega_linear"), hits=0, traced=1, said=said)
    res = harness.check(rec, via="precompile")
    assert res.verdict == "fail"
    assert res.problems == ["precompile: the warm process traced 1 frame(s) with Dynamo and "
                            "loaded 0 precompiled one(s): package bypass: the frame reads a "
                            "closure cell"]
    assert "precompile: 1 guard(s) dropped, so a process that differs there still loads this " \
           "entry: caching_precompile: guard on a global dropped: G['scale']" in res.notes
    # the mega-cache path takes the same records without caching precompile's rule
    res = harness.check(rec, via="mega")
    assert (res.verdict, res.problems) == ("pass", [])


def test_precompile_a_workload_that_crashes_with_it_on_fails_the_path(harness: Harness) -> None:
    rec = load_record("mega_linear")
    crashed = {**rec["recs"]["cold"], "ran": False,
               "error": "Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                        "RuntimeError: cannot pickle a closure\n",
               "artifact": {"torch_said": ["dynamo cache: cannot save the frame"]}}
    res = harness.check(rec, via="precompile", replies={"cold": Reply(record=crashed)})
    assert (res.verdict, res.error) == ("fail", None)
    assert res.problems == ["precompile: the cold workload fails with caching precompile on "
                            "(TORCH_CACHING_PRECOMPILE=1), which the local path runs without: "
                            "RuntimeError: cannot pickle a closure; torch said: dynamo cache: "
                            "cannot save the frame"]
    assert harness.launcher.phases() == ["cold"]
    # under the mega-cache the same crash is the check's error
    res = harness.check(rec, via="mega", replies={"cold": Reply(record=crashed)})
    assert res.verdict == "error" and res.problems == []


def test_an_artifact_that_failed_to_load_is_the_paths_failure(harness: Harness) -> None:
    """The warm process died inside torch's loader: the path fails, naming it."""
    rec = load_record("mega_linear")
    warm = {**rec["recs"]["warm"], "ran": False,
            "error": "Traceback...\n  in load_cache_artifacts\nEOFError: Ran out of input\n"}
    res = harness.check(rec, via="mega", replies={"warm": Reply(record=warm)})
    assert res.verdict == "fail"
    assert res.problems[0] == ("mega: the warm process died inside torch's "
                               "load_cache_artifacts (EOFError: Ran out of input): the artifact the "
                               "cold process built cannot be loaded here")


def test_an_artifact_path_stops_after_a_cold_phase_that_found_it_not_applicable(
        harness: Harness) -> None:
    rec = load_record("aot_linear")
    rec["recs"]["cold"]["artifact"] = {"na": "needs fullgraph=True: the model has a graph break"}
    res = harness.check(rec, via="aot")
    assert (res.verdict, res.notes[0]) == ("n/a", "aot: needs fullgraph=True: the model has a "
                                                  "graph break")
    assert harness.launcher.phases() == ["cold"]


# -- a whole pytest session over replayed phases ---------------------------------------------

def test_a_session_over_replayed_phases_reports_what_the_recorded_sessions_did(
        pytester: pytest.Pytester, in_process: None) -> None:
    """Three marked tests (no torch here: the phases are replayed), one of them with the
    recorded conftest that deletes the compiled kernels between the phases: the
    session's verdicts, terminal lines and JSON report are the recorded sessions'."""
    records = [load_record(c) for c in ("pass_mlp", "fx_config_drift", "kernels_deleted")]
    for rec in records:
        path, name = rec["nodeid"].split("::")
        pytester.makepyfile(**{path[:-3]: MARKED.format(name=name)})
    pytester.makeconftest("")
    (pytester.path / "kernels_deleted" / "conftest.py").write_text(
        "def pytest_compilecache_between_phases(item, cache_root):\n"
        "    for f in (cache_root / 'inductor').rglob('*.so'):\n"
        "        f.unlink()\n")
    launcher = SessionReplay(records)
    result = pytester.runpytest(
        # importlib: this process may have imported tests/test_drift.py as `test_drift`
        "-p", "no:cacheprovider", "--import-mode=importlib", "--compile-cache-check",
        "--compile-cache-store=none", "--compile-cache-device=cpu", "--compile-cache-launcher=fresh",
        f"--compile-cache-root={pytester.path / 'roots'}", "--compile-cache-report=report.json",
        plugins=[UseLauncher(launcher)])
    result.assert_outcomes(passed=1, failed=2)
    assert launcher.started and launcher.closed
    assert {n: r.phases() for n, r in launcher.by_check.items()} == {
        rec["nodeid"]: ["cold", "warm"] for rec in records}
    result.stdout.fnmatch_lines_random([rec["expected"]["session_line"] for rec in records])
    report = json.loads((pytester.path / "report.json").read_text())
    got = {c["nodeid"]: c for c in report["checks"]}
    for rec in records:
        check, exp = got[rec["nodeid"]], rec["expected"]
        assert (check["verdict"], check["problems"]) == (exp["verdict"], exp["problems"])
        assert {k: v["state"] for k, v in check["layers"].items()} == \
            {k: v["state"] for k, v in exp["layers"].items()}
