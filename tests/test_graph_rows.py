"""Issue 29: what a report keeps of a graph's key components. A graph that needs no
explaining keeps its key and their digest; a miss, a bypass and the cold twin of a warm
miss keep every component (the drift, both values, the graph code diff). Real phase
records (tests/data/records/), judged rows only."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

from pytest_compilecache import layers
from pytest_compilecache.layers import keys
from pytest_compilecache.layers.keyed import graph_rows
from pytest_compilecache.wire import CacheRecord

DATA = Path(__file__).parent / "data" / "records"


def rows_of(case: str) -> List[Dict[str, Any]]:
    rec = json.loads((DATA / f"{case}.json").read_text())["recs"]
    return graph_rows(CacheRecord.from_json(rec["cold"]["cache"]),
                      CacheRecord.from_json(rec["warm"]["cache"]), set(), layers.KEYED)


def full(rows: List[Dict[str, Any]]) -> List[str]:
    return [f"{r['phase']} {r['layer']} {r['state']}" for r in rows if "components" in r]


def test_a_passing_check_keeps_keys_and_digests_only() -> None:
    rows = rows_of("pass_mlp")
    assert rows and full(rows) == []
    for r in rows:
        assert r["key"] and len(r["components_digest"]) == 64 and r["components_count"] > 0
    cold = {(r["layer"], r["key"]): r["components_digest"] for r in rows if r["phase"] == "cold"}
    warm = {(r["layer"], r["key"]): r["components_digest"] for r in rows if r["phase"] == "warm"}
    assert cold == warm  # the same components, cold and warm: one digest


def test_a_drifted_key_keeps_both_sides_whole_with_the_drift_and_its_values() -> None:
    rows = rows_of("fx_config_drift")
    assert sorted(full(rows)) == ["cold aot_autograd miss", "cold fx_graph miss",
                                  "warm aot_autograd miss", "warm fx_graph miss"]
    warm = next(r for r in rows if r["phase"] == "warm" and r["layer"] == "fx_graph")
    assert warm["drift"] == [{"component": "inductor_config[epilogue_fusion]",
                              "cold": "False", "warm": "True",
                              "cold_hash": "esstihe2nyydk4mhzpvox3qkajyu5y5t23hk3fi2me7jn75xi3o",
                              "warm_hash": "cev5uo2jlwdhw2uyzcm7vr6cl23azjfw437f5r5lskm7spucos6"}]
    assert keys.components_digest(warm["components"]) == warm["components_digest"]


def test_never_saved_keeps_the_missed_layer_whole_and_the_hit_one_as_a_digest() -> None:
    rows = rows_of("never_saved_aot")
    assert sorted(full(rows)) == ["cold aot_autograd miss", "warm aot_autograd miss"]


def test_a_bypass_keeps_its_components() -> None:
    rows = rows_of("bypass_custom_pass")
    assert {r["state"] for r in rows if "components" in r} == {"bypass"}
    assert all("components" in r for r in rows if r["state"] == "bypass")


def test_a_cold_only_run_keeps_digests_its_store_has_the_components() -> None:
    rec = json.loads((DATA / "pass_mlp.json").read_text())["recs"]
    rows = graph_rows(CacheRecord.from_json(rec["cold"]["cache"]), CacheRecord(), set(),
                      layers.KEYED)
    assert rows and full(rows) == []


def test_the_digest_is_of_the_canonical_json_and_survives_a_round_trip() -> None:
    comps = [["gm", "h1", "a\\nb = x * 2.0"], ["x", "h2", "t\udcff"]]
    assert keys.components_digest(comps) == keys.components_digest(json.loads(json.dumps(comps)))
    assert keys.components_digest(comps) != keys.components_digest(comps[:1])


