"""The shared turn's ledger (--compile-cache-share-variants, issue 50 point 5) without a
compile: it lists only entries saved in the shared root, the turns that could not save
or read what the scenario needs are errors, and a ledger it cannot trust (over its cap,
entries of the wrong types, not one it wrote) is an error naming it, never fewer
entries (which judged a false hit "a nondeterministic compile") nor a crash. On the
recorded `false_hit_custom_pass` phases (tests/test_false_hits.py's session), whose
[three] compiled under the keys [two] wrote. tests/test_false_hits.py runs the same
scenarios in real sessions."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List, Mapping, Optional, Tuple

import pytest

from pytest_compilecache.controller import variants, written
from pytest_compilecache.paths.base import PhasePlan
from pytest_compilecache.wire import PhaseRecord
from test_judges import load, rejudge

TWO = variants.Variant("t.py::test_f[two]", "two", {"scale": "2.0"})
THREE = variants.Variant("t.py::test_f[three]", "three", {"scale": "3.0"})


def _shared(tmp_path: Path, nodeid: str = TWO.nodeid) -> variants.SharedRoot:
    shared = variants.SharedCaches(tmp_path, {"t.py::test_f": 2}).root_for(nodeid)
    assert shared is not None
    return shared


def _save(inductor: Path, rec: Mapping[str, Any]) -> None:
    """torch's files of the record's misses, as a turn that saved them leaves them."""
    for layer, _, e in written.missed(rec):
        d = written.entry_dir(inductor, layer, e["key"])
        d.mkdir(parents=True)
        (d / "entry").write_bytes(b"x")


def _keys(rec: Mapping[str, Any]) -> set:
    return {e["key"] for _, _, e in written.missed(rec)}


def test_the_ledger_names_each_saved_entry_by_its_first_writer_and_a_loader_sees_it(
        tmp_path: Path) -> None:
    rec = load("false_hit_custom_pass")["recs"]
    shared = _shared(tmp_path)
    with shared.turn():
        assert variants.seen_by(shared.ledger(), rec["cold"], TWO)["loaded"] == {}
        _save(shared.root.inductor, rec["cold"])
        assert shared.record(TWO, rec["cold"], _keys(rec["cold"])) == {}
    ledger = shared.ledger()
    assert {e["layer"] for e in ledger.entries.values()} == {"aot_autograd", "fx_graph"}
    assert {e["writer"]["id"] for e in ledger.entries.values()} == {"two"}
    assert ledger.unsaved == {}
    seen = variants.seen_by(ledger, rec["shared"], THREE)  # its hits on the same keys
    assert set(seen["loaded"]) == set(ledger.entries) and seen["not_loaded"] == {}
    assert seen["writers"] == ["t.py::test_f[two]"] and seen["missing"] == {}
    # the writer itself loads nothing "from another variant"
    assert variants.seen_by(ledger, rec["shared"], TWO)["loaded"] == {}
    shared.record(THREE, rec["shared"], set())  # hits write nothing; the first writer stays
    assert shared.ledger() == ledger


def test_an_entry_the_turn_could_not_save_is_no_entry_and_both_turns_are_errors(
        tmp_path: Path) -> None:
    """[two]'s turn over a root that refused its writes (a quota: nothing on disk) while
    its own cold run saved the same keys; [three] then compiles under them."""
    rec = load("false_hit_custom_pass")
    recs = rec["recs"]
    shared = _shared(tmp_path)
    unsaved = shared.record(TWO, recs["cold"], _keys(recs["cold"]))
    assert set(unsaved) == _keys(recs["cold"])
    ledger = shared.ledger()
    assert ledger.entries == {} and set(ledger.unsaved) == set(unsaved)
    seen = variants.seen_by(ledger, recs["cold"], THREE)  # [three] compiled the same keys
    assert seen["loaded"] == {} and set(seen["missing"]) == set(unsaved)
    # [three] computed its own numbers: outputs alone pass it
    recs["shared"]["compare_cold"].update(ok=True, mismatches=[])
    recs["shared"]["variants"] = {**seen, "root": str(shared.root.path)}
    res = rejudge(rec)
    assert res.verdict == "error", res.problems
    [problem] = res.problems
    assert problem.startswith("shared cache: this turn compiled the aot_autograd entry "
                              f"{next(iter(sorted(unsaved)))[:16]}… of graph 0/0 and 1 more "
                              "under the keys that variant [two] compiled before it and "
                              "could not save"), problem
    assert f"{shared.root.path}/inductor/aotautograd" in problem
    assert "Fix: give the shared root room and write access" in problem
    # [two]'s own turn: it saved nothing the others can load
    recs["shared"]["variants"] = {**seen, "missing": {}, "unsaved": unsaved}
    [problem] = rejudge(rec).problems
    assert problem.startswith("shared cache: this turn could not save the aot_autograd "
                              "entry "), problem
    assert "though its own cold run saved them" in problem
    # an entry torch never saves (its own cold run did not either) is no error
    assert shared.record(TWO, recs["cold"], set()) == {}
    # a false hit proven beside an unsaved entry stays the false hit (a fail)
    rec = load("false_hit_custom_pass")
    seen = rec["recs"]["shared"]["variants"]
    seen["unsaved"] = dict(list(seen["loaded"].items())[:1])
    res = rejudge(rec)
    assert res.verdict == "fail" and res.problems[0].startswith("false hit:"), res.problems


def _over_cap(path: Path) -> None:
    with open(path, "wb") as f:
        f.truncate(written.LEDGER_MAX_BYTES + 1)


def _entry(**change: Any) -> Dict[str, Any]:
    e = {"layer": "fx_graph", "graph": "0/0", "backward": False,
         "components": [["gm", "h", "code"]], "writer": TWO.to_json()}
    return {"entries": {"fabc": {**e, **change}}, "unsaved": {}}


@pytest.mark.parametrize("damage, says", [
    ("not json", "cannot be read"),
    ("[1, 2]", "is not a ledger this plugin wrote"),
    ("[" * 100_000, "cannot be read"),
    ("symlink", "is a symlink"),
    ("huge", "cannot be read"),
    (json.dumps({"fabc": _entry()["entries"]["fabc"]}), "is not a ledger this plugin wrote"),
    (json.dumps(_entry(writer="t.py::test_f[two]")), "its writer is not a variant"),
    (json.dumps(_entry(components=[[["gm"], "h", "x"]])), "a component is not"),
    (json.dumps(_entry(layer=["fx_graph"])), "its layer or graph is not one"),
    (json.dumps({"entries": [], "unsaved": {}}), "holds entries of the wrong types"),
])
def test_a_ledger_it_cannot_trust_is_an_error_naming_it_never_fewer_entries(
        tmp_path: Path, damage: str, says: str) -> None:
    shared = _shared(tmp_path)
    ledger = shared.root.phases / variants.LEDGER
    if damage == "symlink":
        (tmp_path / "elsewhere.json").write_text(json.dumps(_entry()))
        ledger.symlink_to(tmp_path / "elsewhere.json")
    elif damage == "huge":
        _over_cap(ledger)
    else:
        ledger.write_text(damage)
    with pytest.raises(written.Damaged) as caught:
        shared.ledger()
    assert f"the ledger of the cache the variants share, {ledger}, " in str(caught.value)
    assert says in str(caught.value)
    assert str(caught.value).endswith("run the session again")


class _Run:
    """What take_turn asks of controller/check.CheckRun: the phase returns `rec`."""

    def __init__(self, tmp_path: Path, me: variants.Variant, rec: Dict[str, Any]) -> None:
        from pytest_compilecache.isolation import CacheRoot

        self.item = SimpleNamespace(nodeid=me.nodeid, params_id=me.id, params=me.params)
        self.roots = [CacheRoot.create(me.nodeid, str(tmp_path / "own"))]
        self.timings: Dict[str, Optional[float]] = {}
        self.snaps: Dict[str, Any] = {}
        self.rec, self.shared_root = rec, None
        self.ran: List[str] = []

    def extra(self, plan: PhasePlan, root: Any) -> Dict[str, Any]:
        return {}

    def run_phase(self, root: Any, phase: str, **kw: Any) -> Tuple[Any, Any]:
        self.ran.append(phase)
        return PhaseRecord.from_json(json.loads(json.dumps(self.rec))), None


PLAN = PhasePlan("shared", shared_root=True, compare_with="cold")


@pytest.mark.parametrize("damage", ["huge", "wrong types"])
def test_a_turn_over_a_ledger_it_cannot_trust_is_not_run_and_errors(
        tmp_path: Path, damage: str) -> None:
    """Over its cap, the loaded entry's writer was lost and the false hit read as "a
    nondeterministic compile"; of the wrong types, the check crashed into an error."""
    rec = load("false_hit_custom_pass")["recs"]
    shared = _shared(tmp_path)
    ledger = shared.root.phases / variants.LEDGER
    if damage == "huge":
        _over_cap(ledger)
    else:
        ledger.write_text(json.dumps(_entry(writer=None)))
    run = _Run(tmp_path, THREE, rec["shared"])
    got, failure = variants.take_turn(run, shared, PLAN, {})
    assert got is None and run.ran == []
    assert failure.verdict == "error"
    assert failure.error.startswith(f"shared phase was not run: the ledger of the cache the "
                                    f"variants share, {ledger}, "), failure.error


def test_a_ledger_that_would_grow_over_its_cap_is_an_error_and_keeps_the_old_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rec = load("false_hit_custom_pass")["recs"]
    shared = _shared(tmp_path)
    run = _Run(tmp_path, TWO, rec["cold"])
    _save(shared.root.inductor, rec["cold"])
    monkeypatch.setattr(written, "LEDGER_MAX_BYTES", 1000)
    got, failure = variants.take_turn(run, shared, PLAN, {})
    assert failure is None and got is not None
    assert "over its 0 MiB cap" in got.variants["unusable"]
    assert "check fewer of this test function's variants in one session" \
        in got.variants["unusable"]
    assert not (shared.root.phases / variants.LEDGER).exists()


def test_a_shared_root_removed_after_the_first_turn_is_not_made_again(tmp_path: Path) -> None:
    rec = load("false_hit_custom_pass")["recs"]
    shared = _shared(tmp_path)
    _save(shared.root.inductor, rec["cold"])
    assert variants.take_turn(_Run(tmp_path, TWO, rec["cold"]), shared, PLAN, {})[1] is None
    shutil.rmtree(shared.root.path)
    later = _shared(tmp_path, THREE.nodeid)
    run = _Run(tmp_path, THREE, rec["shared"])
    got, failure = variants.take_turn(run, later, PLAN, {})
    assert got is None and run.ran == [] and not later.root.path.exists()
    assert failure.error == (
        f"shared phase was not run: the cache root this test function's variants share, "
        f"{shared.root.path}, is gone since it was made for the first variant's turn; this "
        f"turn would start cold and load none of the entries the others saved, so a false hit "
        f"would pass unseen; {written.FIX}")
