"""The typed wire (wire.PhaseRecord): a phase child's JSON read as the judges read it,
missing and unknown keys tolerated, and CheckResult.finalize. Fast: no compiles."""
from __future__ import annotations

import copy
import json
from dataclasses import fields
from pathlib import Path
from typing import Any, Dict, List

import pytest

from pytest_compilecache import paths
from pytest_compilecache.judge import verdict
from pytest_compilecache.layers import REGISTRY, autotune, keys
from pytest_compilecache.layers.kernels import kernel_info
from pytest_compilecache.model import CheckResult
from pytest_compilecache.wire import (WIRE_VERSION, CacheEntry, CacheRecord, ColdComparison,
                                      EagerComparison, PhaseRecord, phase_records)
from pytest_compilecache.wirejson import Wire

LAYER = {layer.name: layer for layer in REGISTRY}

DATA = Path(__file__).parent / "data"


def _real_records() -> List[Any]:
    """(name, phase record as the child wrote it): the recorded GPU phases, and the CPU
    records of tests/data/records (recorded by its record.py) where there are some."""
    out = []
    for f in sorted((DATA / "autotune_gpu").glob("*.json")):
        d = json.loads(f.read_text())
        out += [pytest.param(d[p], id=f"{f.stem}-{p}") for p in ("cold", "warm")]
    for f in sorted((DATA / "records").glob("*.json")):
        d = json.loads(f.read_text())
        out += [pytest.param(r, id=f"{f.stem}-{p}") for p, r in (d.get("recs") or {}).items()]
    return out


def _same(typed: Any, raw: Any, where: str = "record") -> None:
    """Every field the wire knows reads what the child wrote (a null or absent section
    as the judges' empty one)."""
    if isinstance(typed, Wire):
        assert isinstance(raw, dict), where
        for f in fields(typed):  # type: ignore[arg-type]
            if f.name == "raw":
                assert getattr(typed, "raw") is raw, where
            elif f.name in raw and not (f.name == "compile_id" and isinstance(typed, CacheEntry)):
                _same(getattr(typed, f.name), raw[f.name], f"{where}.{f.name}")
    elif isinstance(typed, list) and any(isinstance(x, Wire) for x in typed):
        assert len(typed) == len(raw), where
        for i, (t, r) in enumerate(zip(typed, raw)):
            _same(t, r, f"{where}[{i}]")
    elif isinstance(typed, dict) and any(isinstance(x, Wire) for x in typed.values()):
        assert typed.keys() == raw.keys(), where
        for k in typed:
            _same(typed[k], raw[k], f"{where}[{k!r}]")
    elif raw is None or raw == {} or raw == []:
        assert typed in (None, {}, []) or isinstance(typed, Wire), (where, typed)
    else:
        assert typed == raw, (where, typed, raw)


@pytest.mark.parametrize("raw", _real_records())
def test_a_real_record_reads_what_the_child_wrote(raw: Dict[str, Any]) -> None:
    before = copy.deepcopy(raw)
    rec = PhaseRecord.from_json(raw)
    _same(rec, raw)
    assert raw == before  # reading changes nothing
    assert rec.wire_version == WIRE_VERSION
    cache = raw.get("cache") or {}
    for group, counts in (cache.get("counters") or {}).items():
        for name, n in counts.items():
            assert rec.cache.counter(group, name) == n == verdict.counter(cache, group, name)
    assert rec.cache.counter("inductor", "no_such_counter") == 0
    for layer in ("fx_graph", "aot_autograd"):  # each entry knows its graph
        want = [(cid, e.get("key")) for cid, g in (cache.get("graphs") or {}).items()
                for e in g.get(layer) or []]
        assert [(e.compile_id, e.key) for e in rec.cache.entries(layer)] == want


def test_the_gpu_records_read_their_tuning_and_kernels() -> None:
    """Each layer reads its own section of the cache record, typed by the layer."""
    from pytest_compilecache.layers.kernels import KernelInfo
    from pytest_compilecache.layers.tuning import TuningRecord

    raw = json.loads((DATA / "autotune_gpu" / "mlp_max_autotune.json").read_text())["warm"]
    rec = PhaseRecord.from_json(raw)
    assert rec.phase == "warm" and rec.device_name == "NVIDIA H100 80GB HBM3"
    tuned = LAYER["autotune"].section_of(rec.cache)
    assert isinstance(tuned, TuningRecord)
    assert tuned.watched == raw["cache"]["tuning"]["watched"]
    assert tuned.seen == raw["cache"]["tuning"]["seen"]
    assert rec.cache.counter("inductor", "select_algorithm_autotune") == 2
    kernels = LAYER["kernels"].section_of(rec.cache)
    assert isinstance(kernels, KernelInfo)
    assert kernels.autotune_cache_states == raw["cache"]["kernels"]["autotune_cache_states"]
    assert kernels.triton_listener is False  # cut from the record: the default
    # the judges read it typed or as JSON alike
    assert autotune.autotune_benchmarks(rec.cache) == autotune.autotune_benchmarks(raw["cache"])


def test_missing_keys_read_as_the_judges_defaults() -> None:
    """An older torch or a failed phase leaves sections out; the observer that never
    stopped writes `"cache": null`."""
    for raw in ({}, {"phase": "cold", "cache": None, "artifact": None, "versions": None}):
        rec = PhaseRecord.from_json(raw)
        assert rec.error is None and rec.ran is False and rec.device is None
        assert rec.versions == {} and rec.job_id == {} and rec.outputs == {}
        assert rec.notes == [] and rec.compare_eager is None and rec.compare_cold is None
        assert rec.cache == CacheRecord()
        assert rec.cache.counter("frames", "total") == 0
        assert rec.cache.sections == {} and rec.cache.layer_config == {}
        kernels = kernel_info(rec.cache)
        assert kernels.triton_compiled is None and kernels.kernels_via_triton_compile == 0
        assert kernels.ptxas_path is None
        assert rec.cache.dynamo.resets == 0 and rec.cache.dynamo.compiles == []
        art = rec.artifact
        assert art.na is None and art.error is None and art.files == {} and art.bytes == 0
        assert art.raw == {} and art.torch_said == [] and art.load_s is None
    # a section there but empty is, for the judges, none (`if not section`)
    rec = PhaseRecord.from_json({"compare_eager": {}, "compare_cold": None,
                                 "cache": {"tuning": {}, "kernels": {"ptxas_path": {}}}})
    assert rec.compare_eager is None and rec.compare_cold is None
    assert LAYER["autotune"].section_of(rec.cache) is None
    assert kernel_info(rec.cache).ptxas_path is None
    # inside a section: the defaults each judge used
    m = EagerComparison.from_json({"ok": False, "mismatches": [{"name": "out"}]})
    assert m.mismatches[0].message == "" and m.mismatches[0].float64 is None
    assert m.gradient_rel_error == 0 and m.total is None and m.float64.available is False
    # a path's own section is the path's to type (paths/remote.py)
    from pytest_compilecache.paths.remote import tallies

    remote = PhaseRecord.from_json({"artifact": {"remote": {"RemoteFxGraphCache": {"put": 2}}}})
    stats = tallies(remote.artifact)["RemoteFxGraphCache"]
    assert (stats.put, stats.hit, stats.miss, stats.exception) == (2, 0, 0, 0)
    cfg = CacheRecord.from_json({"layer_config": {"fx_graph": {"why": None}}})
    assert cfg.layer_config["fx_graph"].enabled is True


def test_unknown_keys_are_skipped() -> None:
    """A newer child's keys: read past, never an error."""
    raw = {"phase": "warm", "wire_version": 1, "from_the_future": {"x": 1},
           "cache": {"counters": {"frames": {"total": 3}}, "new_section": [1, 2],
                     "kernels": {"triton_compiled": 2, "new_tally": 9},
                     "graphs": {"0/0": {"fx_graph": [{"key": "k", "state": "hit",
                                                      "new_field": True}],
                                        "new_layer": []}}},
           "compare_cold": {"ok": True, "mode": "bitwise", "mismatches": [],
                            "new_stat": 0.5}}
    rec = PhaseRecord.from_json(raw)
    assert rec.cache.counter("frames", "total") == 3 and kernel_info(rec.cache).triton_compiled == 2
    assert [(e.compile_id, e.key, e.state) for e in rec.cache.entries("fx_graph")] == [
        ("0/0", "k", "hit")]
    assert rec.compare_cold is not None and rec.compare_cold.ok is True
    assert rec.compare_cold.raw is raw["compare_cold"]  # the report gets it as written
    assert not hasattr(rec, "from_the_future")


def test_a_typed_record_is_read_once() -> None:
    rec = PhaseRecord.from_json({"phase": "cold"})
    assert PhaseRecord.from_json(rec) is rec
    assert phase_records({"cold": rec})["cold"] is rec
    assert CacheRecord.from_json(rec.cache) is rec.cache
    assert ColdComparison.optional(None) is None


def _pair() -> Dict[str, Dict[str, Any]]:
    """A cold and a warm record as a child writes them (cut short)."""
    comp = [["gm", "aa", "graph code"], ["grad_enabled", "bb", "False"]]
    cold_graph = {"fx_graph": [{"key": "fk", "state": "miss", "backward": False,
                                "components": comp}],
                  "aot_autograd": [{"key": "ak", "state": "miss", "backward": False,
                                    "components": comp}],
                  "pgo": {"read": 0, "written": 1}}
    warm_graph = {"fx_graph": [{"key": "fk2", "state": "miss", "backward": False,
                                "components": [["gm", "cc", "other code"],
                                               ["grad_enabled", "bb", "False"]]}],
                  "aot_autograd": [{"key": "ak", "state": "hit", "backward": False,
                                    "components": comp}],
                  "pgo": {"read": 1, "written": 0}}
    config = {"fx_graph": {"enabled": True, "why": None},
              "aot_autograd": {"enabled": True, "why": None},
              "dynamo_pgo": {"enabled": True, "why": None}}
    base = {"device": "cpu", "form": "model_case", "versions": {"torch": "2.13"},
            "job_id": {"value": None, "source": "none"}, "ran": True, "error": None,
            "outputs": {"out": {"digest": "d"}}}
    eager = {"ok": True, "total": 1, "random": [], "mismatches": [], "float64": {}}
    cold = dict(base, phase="cold", compare_eager=eager,
                cache={"counters": {"frames": {"total": 1}}, "graphs": {"0/0": cold_graph},
                       "kernels": {"kernels_via_triton_compile": 0}, "layer_config": config})
    warm = dict(base, phase="warm", compare_eager=eager,
                compare_cold={"ok": False, "mode": "bitwise", "within_noise": [],
                              "mismatches": [{"name": "out", "max_abs_diff": 0.5,
                                              "message": "differs"}]},
                cache={"counters": {"frames": {"total": 1}}, "graphs": {"0/0": warm_graph},
                       "kernels": {}, "layer_config": config})
    return {"cold": cold, "warm": warm}


def test_the_judges_read_a_typed_record_as_its_json() -> None:
    recs = _pair()
    snaps = {"cold": {"inductor/fxgraph/aa/fk": 10}, "warm": {"inductor/fxgraph/aa/fk": 10,
                                                               "inductor/fxgraph/cc/fk2": 10}}
    local = paths.builtin()["local"]()
    from_json = local.judge("t.py::test_m", copy.deepcopy(recs), snaps, {}, None)
    typed = local.judge("t.py::test_m", phase_records(copy.deepcopy(recs)), snaps, {}, None)
    assert from_json.to_json() == typed.to_json()
    assert from_json.verdict == "fail"
    assert from_json.layers["fx_graph"].state == "miss"
    assert "gm (graph code differs)" in from_json.layers["fx_graph"].reasons[0]
    assert from_json.layers["aot_autograd"].state == "hit"
    assert from_json.outputs["warm_vs_cold"] == recs["warm"]["compare_cold"]
    assert from_json.job_id == {"cold": recs["cold"]["job_id"], "warm": recs["warm"]["job_id"]}
    drift = [g for g in from_json.graphs if g.get("drift")]
    assert [d["component"] for d in drift[0]["drift"]] == ["gm"]
    rec = verdict.recorded("t.py::test_m", recs["cold"], {})
    assert rec.verdict == "recorded" and len(rec.graphs) == 2


def test_keys_match_typed_entries_and_manifest_rows_alike() -> None:
    comp = [["gm", "aa", "x"], ["a", "1", "one"]]
    rows = [{"key": "k1", "backward": False, "components": comp},
            {"key": "k2", "backward": True, "components": comp}]
    typed = [CacheEntry.from_json(r) for r in rows]
    mine = {"key": "k3", "backward": False, "components": [["gm", "aa", "x"], ["a", "2", "two"]]}
    assert keys.best_match(mine, rows) is rows[0]
    assert keys.best_match(CacheEntry.from_json(mine), typed) is typed[0]
    assert keys.differing_components(rows[0], mine) == keys.differing_components(
        typed[0], CacheEntry.from_json(mine)) == [{"component": "a", "cold": "one",
                                                   "warm": "two", "cold_hash": "1",
                                                   "warm_hash": "2"}]


def test_the_controllers_calls_take_json_or_typed_records() -> None:
    reg = paths.builtin()
    assert reg["mega"]().goes_on({}) is True
    assert reg["mega"]().goes_on({"artifact": {"na": "no mega-cache"}}) is False
    assert reg["mega"]().goes_on(PhaseRecord.from_json({"artifact": {"error": "x"}})) is False
    # the deploy scenario compiles this commit afresh after every warm run, random or not
    assert reg["deploy"]().goes_on({"phase": "warm"}) is True
    assert reg["deploy"]().goes_on({"phase": "warm", "compare_eager": {
        "random": [{"name": "drop"}]}}) is True
    assert reg["deploy"]().goes_on({"phase": "cold"}) is True
    err = CheckResult(nodeid="t", verdict="error", error="cold phase failed")
    crashed = {"ran": False, "error": "Traceback...\nRuntimeError: boom",
               "artifact": {"torch_said": ["package bypass: x"]}}
    res = reg["precompile"]().failed("cold", crashed, err)
    assert res.verdict == "fail" and res.error is None
    assert res.problems[0].endswith("RuntimeError: boom; torch said: package bypass: x")


def test_an_artifact_path_that_failed_or_cannot_run() -> None:
    mega = paths.builtin()["mega"]()
    na = mega.judge("t", {"cold": {"artifact": {"na": "torch too old"}, "versions": {"t": 1}}},
                    {}, {}, None)
    assert (na.verdict, na.notes, na.versions) == ("n/a", ["mega: torch too old"], {"t": 1})
    failed = mega.judge("t", {"cold": {"artifact": {"error": "save failed"}}}, {}, {}, None)
    assert (failed.verdict, failed.problems) == ("fail", ["mega: save failed"])
    no_warm = mega.judge("t", {"cold": {}}, {}, {}, None)
    assert (no_warm.verdict, no_warm.problems) == ("fail", ["mega: the warm phase did not run"])


@pytest.mark.parametrize("verdict_before, problems, after", [
    ("pass", [], "pass"), ("pass", ["x"], "fail"), ("fail", ["x"], "fail"),
    ("error", ["x"], "error"), ("not run", ["x"], "not run"),
    # one rule for judges and session (issue 39): a recorded run whose keys drifted from
    # the baseline, an n/a path that gained a session problem, fail
    ("n/a", ["x"], "fail"), ("recorded", ["x"], "fail"), ("recorded", [], "recorded")])
def test_finalize_fails_a_check_with_problems_only(verdict_before: str, problems: List[str],
                                                   after: str) -> None:
    res = CheckResult(nodeid="t", verdict=verdict_before, problems=list(problems))
    assert res.finalize() is res
    assert res.verdict == after and res.problems == problems
    assert res.finalize().verdict == after  # once or twice alike


def test_finalize_reads_what_was_added_since() -> None:
    """The verdict is derived again from the result's inputs: problems taken off (an
    accepted cost) pass it again; a fault (a full disk, Redis gone) makes it an error
    whatever its problems; the path's own failure makes an error a fail."""
    res = CheckResult(nodeid="t", verdict="pass", problems=["dynamo_pgo: miss"]).finalize()
    assert res.verdict == "fail"
    res.problems.clear()
    assert res.finalize().verdict == "pass"
    res.fault = True
    assert res.finalize().verdict == "error"
    crash = CheckResult(nodeid="t", verdict="error", error="warm phase crashed").finalize()
    assert crash.verdict == "error"
    crash.error_fails = True
    assert crash.finalize().verdict == "fail"
    # the kind stays in the report (show REPORT reads a failed recording by it)
    assert crash.to_json()["kind"] == "error" and "error_fails" not in crash.to_json()
