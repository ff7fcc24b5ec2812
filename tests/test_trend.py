"""Warm starts per commit (history/trend.py): each check's manifest entry keeps its run
(cold s, warm s, layer states), the session reads the last commits back into the
report, the job summary draws them and flags the commit where a check got worse.
Through the real CheckRun and store, over replayed phase records: no compile."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Dict, List

import pytest

from fakes import load_record
from pytest_compilecache.cli import main as cli_main
from pytest_compilecache.history import trend
from pytest_compilecache.history.store import ManifestStore
from pytest_compilecache.render import markdown
from test_orchestrator import Harness

NODEID = "hit/test_hit.py::test_inference"


def _commit(i: int) -> Dict[str, Any]:
    sha = f"{i:02d}" + "ab" * 19
    return {"sha": sha, "short": sha[:10], "dirty": False, "subject": f"commit {i}",
            "time": 1_700_000_000 + 3600 * i}


def _fx_missed(rec: Dict[str, Any]) -> Dict[str, Any]:
    """pass_mlp as a warm process whose FX-graph lookups missed (the planted regression)."""
    rec = copy.deepcopy(rec)
    for g in rec["recs"]["warm"]["cache"]["graphs"].values():
        for e in g.get("fx_graph") or []:
            e["state"] = "miss"
    return rec


def _history(harness: Harness, tmp_path: Path, planted: int = 7, commits: int = 10
             ) -> List[Dict[str, Any]]:
    """`commits` main runs of one check, the FX graph missing at commit `planted`; the
    last session's trend."""
    store = str(tmp_path / "store")
    good = load_record("pass_mlp")
    trends: List[Dict[str, Any]] = []
    for i in range(1, commits + 1):
        rec = _fx_missed(good) if i == planted else good
        launcher_rec = copy.deepcopy(rec)
        res = harness.check(launcher_rec, store=store, _commit=_commit(i))
        assert res.layers["fx_graph"].state == ("miss" if i == planted else "hit")
        assert harness.session is not None
        trends = harness.session.history.trend()
    return trends


@pytest.fixture
def committed_harness(request: pytest.FixtureRequest, tmp_path: Path) -> Harness:
    """The Harness, each session told its commit (what git would say)."""

    class Committed(Harness):
        def check(self, rec: Dict[str, Any], **kw: Any) -> Any:  # type: ignore[override]
            commit = kw.pop("_commit")
            original = self.start

            def start(launcher: Any, **settings: Any) -> Any:
                session = original(launcher, **settings)
                session.history._commit = commit
                return session

            self.start = start  # type: ignore[method-assign]
            try:
                return super().check(rec, **kw)
            finally:
                self.start = original  # type: ignore[method-assign]

    return Committed(request.config, tmp_path)


def test_each_check_entry_keeps_its_run(committed_harness: Harness, tmp_path: Path) -> None:
    res = committed_harness.check(copy.deepcopy(load_record("pass_mlp")),
                                  store=str(tmp_path / "store"), _commit=_commit(1))
    [path] = (tmp_path / "store" / "manifests").glob("*/*.json")
    entry = json.loads(path.read_text())["checks"][NODEID]
    assert entry["run"] == {"cold_s": round(res.timings["cold_s"], 2),
                            "warm_s": round(res.timings["warm_s"], 2),
                            "layers": {k: lv.state for k, lv in res.layers.items()}}


def test_ten_commits_flag_the_layer_that_went_from_hit_to_miss_at_commit_7(
        committed_harness: Harness, tmp_path: Path) -> None:
    [t] = _history(committed_harness, tmp_path)
    assert [c["short"] for c in t["commits"]] == [_commit(i)["short"] for i in range(1, 11)]
    assert [c["misses"] for c in t["commits"]] == [0] * 6 + [1] + [0] * 3
    assert t["flags"] == [{"commit": _commit(7)["short"], "nodeid": NODEID,
                           "what": "fx_graph: hit -> miss"}]
    # the job summary draws the ten commits and names the flagged one
    text = markdown.render({"checks": [], "trend": [t]})
    assert "```mermaid\nxychart-beta" in text
    assert f'"{_commit(1)["short"][:7]}"' in text and f'"{_commit(10)["short"][:7]}"' in text
    assert f"| `{_commit(7)['short']}` | `{NODEID}` | fx_graph: hit -> miss |" in text


def test_the_trend_command_prints_the_stores_history(
        committed_harness: Harness, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _history(committed_harness, tmp_path, commits=8)
    assert cli_main(["trend", "--store", str(tmp_path / "store"), "-n", "5"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("01abab") or
            line[:2] in {f"{i:02d}" for i in range(1, 9)}]
    assert [r.split()[0] for r in rows[:5]] == [_commit(i)["short"] for i in range(4, 9)]
    assert f"{_commit(7)['short']}  {NODEID}: fx_graph: hit -> miss" in out


def _point(cold: float, warm: float, keys: str = "k1", **layers: str) -> trend.Point:
    return trend.Point(cold_s=cold, warm_s=warm, keys=keys,
                       layers=layers or {"fx_graph": "hit"})


def test_keys_that_changed_and_a_warm_share_past_the_alert_are_flagged() -> None:
    history = [trend.Commit(f"s{i}", f"s{i}", "", float(i), {"t": p}) for i, p in enumerate([
        _point(20, 2.0), _point(20, 2.5), _point(20, 2.6, keys="k2"), _point(20, 5.3, keys="k2"),
        _point(20, 5.0, keys="k2", fx_graph="bypass")])]
    got = [(f.commit, f.what) for f in trend.flags(history, alert=2.0)]
    assert got == [("s2", "keys changed since s1 (`pytest-compilecache bisect s1 s2`)"),
                   ("s3", "warm/cold 0.13 -> 0.27 (2.0x, alert at 2x)"),
                   ("s4", "fx_graph: hit -> bypass")]
    # 2.5x is no alert at 3x; a check that is new at a commit is compared with nothing
    assert [f.what for f in trend.flags(history[2:4], alert=3.0)] == []
    assert trend.flags([trend.Commit("a", "a", "", 0, {}),
                        trend.Commit("b", "b", "", 1, {"t": _point(20, 19)})]) == []


def test_dirty_and_unknown_commits_are_no_point_and_commits_go_by_time() -> None:
    def manifest(sha: str, when: Any, dirty: bool = False) -> Dict[str, Any]:
        return {"commit": {"sha": sha, "short": sha, "dirty": dirty, "time": when},
                "checks": {"t": {"verdict": "pass", "run": {"cold_s": 1, "warm_s": "x",
                                                             "layers": ["bad"]}}}}

    got = trend.commits([manifest("b", 2), manifest("a", 1), manifest("d", 3, dirty=True),
                         manifest("unknown", 4), {"commit": None}], last=10)
    assert [c.sha for c in got] == ["a", "b"]
    p = got[0].points["t"]  # what a hand edit left unreadable reads as nothing
    assert (p.cold_s, p.warm_s, p.layers, p.ratio) == (1.0, None, {}, None)


def test_two_hundred_checks_over_ten_commits_stay_under_the_summary_limit(
        tmp_path: Path) -> None:
    store = ManifestStore(tmp_path)
    env = {"torch": "2.13.0", "device": "cpu"}
    for i in range(1, 11):
        checks = {f"tests/test_models.py::test_model[{n:03d}]": {
            "verdict": "pass", "graphs": {"g0/fx_graph": {"layer": "fx_graph", "key": f"k{n}-{i}"}},
            "run": trend.run_entry(30.0, 3.0 if i != 7 else 9.0,
                                   {"fx_graph": "miss" if i == 7 else "hit"})}
            for n in range(200)}
        store.merge(_commit(i), env, checks)
    [env_id] = store.environments_of(_commit(10)["sha"])
    t = trend.to_json(trend.commits(store.recent(env_id, 60), last=10))
    assert len(t["commits"]) == 10 and t["commits"][0]["checks"] == 200
    text = markdown.render({"checks": [], "trend": [{"environment": env_id, **t}]})
    assert len(text.encode()) < markdown.SUMMARY_LIMIT_BYTES
    assert f"… {len(t['flags']) - 60} more in the JSON report" in text


def test_a_recording_is_a_point_for_keys_alone_and_keeps_the_run_it_replaces(
        tmp_path: Path) -> None:
    """A baseline, bisect or keys-only recording of a clean commit writes entries with no
    run: a point for key changes, not for times or layers (a miss after one is still
    flagged against the run before it), and a recording of a commit already checked
    keeps its run."""
    store = ManifestStore(tmp_path)
    env = {"torch": "2.13.0"}
    node = "t.py::test_a"
    graphs = {"fx_graph:0/0": {"layer": "fx_graph", "key": "k"}}
    store.merge(_commit(1), env, {node: {"verdict": "pass", "graphs": graphs,
                                         "run": trend.run_entry(20, 2, {"fx_graph": "hit"})}})
    store.merge(_commit(2), env, {node: {"verdict": "recorded", "graphs": graphs}})
    store.merge(_commit(3), env, {node: {"verdict": "fail", "graphs": graphs,
                                         "run": trend.run_entry(20, 9, {"fx_graph": "miss"})}})
    store.merge(_commit(1), env, {node: {"verdict": "recorded", "graphs": graphs}})
    [env_id] = store.environments_of(_commit(3)["sha"])
    history = trend.commits(store.recent(env_id, 10))
    assert [c.short for c in history] == [_commit(i)["short"] for i in (1, 2, 3)]
    assert history[0].points[node].timed and not history[1].points[node].timed
    assert {(f.commit, f.what) for f in trend.flags(history)} == {
        (_commit(3)["short"], "fx_graph: hit -> miss"),
        (_commit(3)["short"], "warm/cold 0.10 -> 0.45 (4.5x, alert at 2x)")}
    rows = trend.to_json(history)["commits"]
    assert [(r["checks"], r["keys_only"]) for r in rows] == [(1, 0), (0, 1), (1, 0)]
    assert any(line.startswith(f"{_commit(2)['short']}    keys         -")
               for line in trend.table_lines(trend.to_json(history))), rows


def test_keys_changed_are_flagged_at_the_recording_that_changed_them_with_range_and_names(
        tmp_path: Path) -> None:
    """Full runs at commits 1 and 4, keys-only recordings at 2 and 3, the keys changed at
    3 (a config flip): the flag lands on 3, since 2, with the components from the store."""
    store = ManifestStore(tmp_path)
    env = {"torch": "2.13.0"}
    node = "t.py::test_a"

    def graphs(flag: str) -> Dict[str, Any]:
        comps = [["inductor_config[fallback_random]", flag, flag], ["gm", "g1", "y = x"]]
        return {"fx_graph:0/0": {"layer": "fx_graph", "key": f"k{flag}", "components": comps}}

    run = trend.run_entry(20, 2, {"fx_graph": "hit"})
    for i, flag, ran in ((1, "F", True), (2, "F", False), (3, "T", False), (4, "T", True)):
        entry = {"verdict": "pass" if ran else "recorded", "graphs": graphs(flag),
                 **({"run": run} if ran else {})}
        store.merge(_commit(i), env, {node: entry})
    [env_id] = store.environments_of(_commit(4)["sha"])
    history = trend.commits(store.recent(env_id, 10))
    got = trend.flags(history, count=lambda a, b: 1, explain=trend.store_explain(store))
    s2, s3 = _commit(2)["short"], _commit(3)["short"]
    assert [(f.commit, f.what) for f in got] == [(s3, (
        f"keys changed since {s2} (1 commit(s); `pytest-compilecache bisect {s2} {s3}`): "
        f"inductor_config[fallback_random]"))]


def test_a_sibling_branchs_commits_are_no_points_of_this_lines_trend(tmp_path: Path) -> None:
    # issue 52, as a newcomer met it: the store held main, PR a (a config flip) and PR b
    # (a model change), both branched from main; `trend` on PR b listed PR a's commit
    # and flagged PR b's keys as changed "since" it, with PR a's component
    from conftest import commit, git, new_repo
    from pytest_compilecache.history.git import on_line

    repo = new_repo(tmp_path / "repo")
    base = commit(repo, "main", {"m.py": "x = 1\n"})
    git(repo, "checkout", "-q", "-b", "pr-a")
    sibling = commit(repo, "pr a", {"m.py": "x = 2\n"})
    git(repo, "checkout", "-q", "-b", "pr-b", base)
    tip = commit(repo, "pr b", {"m.py": "x = 3\n"})
    placed = on_line(repo)
    assert (placed(base), placed(tip), placed(sibling)) == (True, True, False)
    assert placed("0" * 40)  # an object this clone lacks is not known to be off the line

    def manifest(sha: str, when: int, key: str) -> Dict[str, Any]:
        graphs = {"fx_graph:0/0": {"layer": "fx_graph", "key": key}}
        return {"commit": {"sha": sha, "short": sha[:10], "dirty": False, "time": when},
                "checks": {"t": {"verdict": "recorded", "graphs": graphs}}}

    stored = [manifest(base, 1, "k0"), manifest(sibling, 2, "ka"), manifest(tip, 3, "kb")]
    assert [c.sha for c in trend.commits(stored, 10, placed)] == [base, tip]
    flagged = trend.flags(trend.commits(stored, 10, placed), count=lambda a, b: 1)
    assert [f.what.split(" (")[0] for f in flagged] == [f"keys changed since {base[:10]}"]
