"""Issue 29: what a manifest keeps of a graph's key components. A stored row keeps the
key and their digest; the store keeps the components once per digest (gzip, 0700 dirs),
and drift, `diff` and bisect load them back, naming both values and the graph code diff;
a missing or damaged file is an error naming it and the repair (tests/test_broken_stores.py
for the manifests themselves). Real files; no compile, no process but one CLI's."""
from __future__ import annotations

import gzip
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

from pytest_compilecache.cli import as_manifest, main
from pytest_compilecache.history import manifest as mf
from pytest_compilecache.history.blobs import BadComponents, ComponentBlobs
from pytest_compilecache.history.store import ManifestStore
from pytest_compilecache.layers import keys

ENV = {"torch": "2.13.0", "triton": None, "cuda": None, "python": "3.11.7", "device": "cpu",
       "device_name": None}
NODE = "t.py::test_a"


# -- the blobs -------------------------------------------------------------------------------
COMPS = [["gm", "g1", "a\\nb = x * 2.0"], ["inductor_config[x]", "c1", "True"]]
HEAD = [["gm", "g2", "a\\nb = x * 3.0"], ["inductor_config[x]", "c1", "True"]]


def test_components_are_stored_once_gzipped_in_private_dirs(tmp_path) -> None:
    blobs = ComponentBlobs(tmp_path)
    digest = blobs.put(COMPS)
    assert blobs.put(json.loads(json.dumps(COMPS))) == digest
    (path,) = (tmp_path / "components").rglob("*.json.gz")
    assert path == tmp_path / "components" / digest[:2] / f"{digest}.json.gz"
    assert json.loads(gzip.decompress(path.read_bytes())) == COMPS
    for d in (path.parent, path.parent.parent):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    assert blobs.get(digest, "m.json") == COMPS
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


DAMAGE = {"missing": None, "truncated": b"\x1f\x8b\x08\x00", "not gzip": b"{}",
          "not JSON": gzip.compress(b"[[1,"), "other content": gzip.compress(b"[]")}


@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_a_missing_or_damaged_blob_names_its_file_the_manifest_and_the_repair(tmp_path, name):
    blobs = ComponentBlobs(tmp_path)
    digest = blobs.put(COMPS)
    path = blobs.path(digest)
    if DAMAGE[name] is None:
        path.unlink()
    else:
        path.write_bytes(DAMAGE[name])
    with pytest.raises(BadComponents) as raised:
        blobs.get(digest, "/s/manifests/e/abc.json")
    said = str(raised.value)
    assert said.startswith(f"the key components {path} that /s/manifests/e/abc.json names "
                           f"are unusable: "), said
    delete = "" if name == "missing" else f"delete {path}, then "
    assert f"; {delete}delete /s/manifests/e/abc.json and re-record" in said and "\n" not in said
    assert isinstance(raised.value, mf.BadManifest)  # every reader's guard catches it
    assert blobs.put(COMPS) == digest and blobs.get(digest, "m") == COMPS  # a put repairs it


# -- the store and drift -----------------------------------------------------------------------
def entry(comps: List[Any], key: str = "f1") -> Dict[str, Any]:
    cache = {"graphs": {"0/0": {"fx_graph": [{"key": key, "state": "miss", "components": comps}]}}}
    return mf.check_entry(cache, "pass")


def stored(root: Path, sha: str, comps: List[Any], key: str) -> Dict[str, Any]:
    store = ManifestStore(root)
    path = store.merge({"sha": sha, "dirty": False}, ENV, {NODE: entry(comps, key)})
    return json.loads(path.read_text())


def test_a_stored_row_keeps_key_digest_and_count_and_drift_loads_both_values(tmp_path):
    base = stored(tmp_path, "a" * 40, COMPS, "f1")
    assert base["schema_version"] == 2 and mf.problem(base) is None
    row = base["checks"][NODE]["graphs"]["fx_graph:0/0"]
    assert "components" not in row and row["components_count"] == 2
    assert row["components_digest"] == keys.components_digest(COMPS)
    cmp = mf.compare_check(base["checks"][NODE], entry(HEAD, "f2"),
                           load_old=ManifestStore(tmp_path).loader(base))
    (g,) = cmp["graphs"]
    assert cmp["status"] == "drifted" and g["components"] == [
        {"component": "gm", "old": "a\\nb = x * 2.0", "new": "a\\nb = x * 3.0",
         "old_hash": "g1", "new_hash": "g2"}]
    assert "-b = x * 2.0" in g["graph_code_diff"] and "+b = x * 3.0" in g["graph_code_diff"]
    same = mf.compare_check(base["checks"][NODE], entry(COMPS, "f1"),
                            load_old=lambda row: pytest.fail("loaded an unchanged graph"))
    assert same["status"] == "unchanged"


def test_a_version_1_manifest_is_read_compared_and_upgraded_by_a_merge(tmp_path):
    store = ManifestStore(tmp_path)
    old = mf.new_manifest({"sha": "b" * 40, "dirty": False}, ENV)
    old["schema_version"] = 1
    old["checks"][NODE] = {"verdict": "pass", "graphs": {"fx_graph:0/0": {
        "layer": "fx_graph", "compile_id": "0/0", "backward": False, "key": "f1",
        "state": "miss", "components": COMPS}}}
    path = store.path(mf.environment_id(ENV), "b" * 40)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(old))
    v1 = store.read(mf.environment_id(ENV), "b" * 40)
    cmp = mf.compare_check(v1["checks"][NODE], entry(HEAD, "f2"), load_old=store.loader(v1))
    assert [c["component"] for g in cmp["graphs"] for c in g["components"]] == ["gm"]
    store.merge({"sha": "b" * 40, "dirty": False}, ENV, {"t.py::test_b": entry(HEAD, "f2")})
    now = json.loads(path.read_text())
    assert now["schema_version"] == 2 and set(now["checks"]) == {NODE, "t.py::test_b"}
    assert not any("components" in g for e in now["checks"].values()
                   for g in e["graphs"].values())
    assert len(list((tmp_path / "components").rglob("*.json.gz"))) == 2


def test_a_baseline_whose_components_are_gone_is_a_problem_naming_the_file(tmp_path):
    base = stored(tmp_path, "a" * 40, COMPS, "f1")
    blob = ComponentBlobs(tmp_path).path(keys.components_digest(COMPS))
    blob.unlink()
    store = ManifestStore(tmp_path)
    with pytest.raises(BadComponents) as raised:
        mf.compare_check(base["checks"][NODE], entry(HEAD, "f2"), load_old=store.loader(base))
    manifest_path = store.path(mf.environment_id(ENV), "a" * 40)
    assert f"the key components {blob} that {manifest_path} names are unusable: missing" \
        in str(raised.value)


def test_inlined_carries_a_manifest_into_another_store_with_its_components(tmp_path):
    base = stored(tmp_path / "one", "a" * 40, COMPS, "f1")
    other = ManifestStore(tmp_path / "two")
    other.merge(base["commit"], base["environment"],
                ManifestStore(tmp_path / "one").inlined(base)["checks"])
    assert other.blobs.get(keys.components_digest(COMPS), "m") == COMPS


# -- the CLI -----------------------------------------------------------------------------------
def two_manifests(root: Path) -> List[str]:
    stored(root, "a" * 40, COMPS, "f1")
    stored(root, "c" * 40, HEAD, "f2")
    store = ManifestStore(root)
    return [str(store.path(mf.environment_id(ENV), sha)) for sha in ("a" * 40, "c" * 40)]


def test_diff_of_stored_manifests_names_both_values_and_the_graph_code(tmp_path, capsys):
    a, b = two_manifests(tmp_path)
    assert main(["diff", a, b]) == 1
    out = capsys.readouterr().out
    assert "drifted   t.py::test_a" in out and "gm (graph code) changed" in out
    assert "-b = x * 2.0" in out and "+b = x * 3.0" in out


def test_diff_of_a_manifest_whose_blob_is_damaged_exits_2_naming_it(tmp_path, capsys):
    a, b = two_manifests(tmp_path)
    blob = ComponentBlobs(tmp_path).path(keys.components_digest(COMPS))
    blob.write_bytes(b"cut")
    assert main(["diff", a, b]) == 2
    out, err = capsys.readouterr()
    assert len(err.strip().splitlines()) == 1 and str(blob) in err, err
    assert f"delete {blob}, then delete {a} and re-record" in err and out == ""


def test_diff_of_a_manifest_out_of_its_store_asks_for_the_store(tmp_path, capsys):
    a, b = two_manifests(tmp_path / "store")
    copy = tmp_path / "a.json"
    copy.write_text(Path(a).read_text())
    assert main(["diff", str(copy), b]) == 2
    assert "pass --store" in capsys.readouterr().err
    assert main(["diff", str(copy), b, "--store", str(tmp_path / "store")]) == 1
    assert "+b = x * 3.0" in capsys.readouterr().out


def v3_report(comps: List[Any], key: str, store: Any) -> Dict[str, Any]:
    row = {"phase": "cold", "layer": "fx_graph", "compile_id": "0/0", "backward": False,
           "state": "miss", "key": key, "saved": True,
           "components_digest": keys.components_digest(comps), "components_count": len(comps)}
    return {"schema": "pytest-compilecache/report", "schema_version": 3,
            "created": "2026-11-26T00:00:00.000+00:00", "settings": {"store": store},
            "commit": {"sha": "a" * 40, "short": "a" * 10, "dirty": False},
            "checks": [{"nodeid": NODE, "verdict": "pass", "versions": {"torch": "2.13.0",
                        "python": "3.11.7"}, "device": "cpu", "graphs": [row]}]}


def test_diff_of_reports_loads_a_passing_graphs_components_from_the_store_it_names(tmp_path,
                                                                                   capsys):
    two_manifests(tmp_path / "store")
    paths = []
    for name, comps, key in (("a", COMPS, "f1"), ("b", HEAD, "f2")):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(v3_report(comps, key, str(tmp_path / "store"))))
    assert mf.problem(as_manifest(json.loads(paths[0].read_text()))) is None
    assert main(["diff", *map(str, paths)]) == 1
    assert "+b = x * 3.0" in capsys.readouterr().out
    for p in paths:  # a report of another machine: its store is not here
        p.write_text(json.dumps(v3_report(COMPS if p.stem == "a" else HEAD,
                                          "f1" if p.stem == "a" else "f2", "/nonexistent")))
    assert main(["diff", *map(str, paths)]) == 1
    out = capsys.readouterr().out
    assert "fx_graph:0/0: key changed  f1 -> f2" in out
    assert "components not at hand (only their digest: old " in out and "--store" in out


def test_show_of_a_stored_manifest_counts_components_without_loading_them(tmp_path):
    a, _ = two_manifests(tmp_path)
    for blob in (tmp_path / "components").rglob("*.json.gz"):
        os.unlink(blob)
    proc = subprocess.run([sys.executable, "-m", "pytest_compilecache", "show", a],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "fx_graph:0/0" in proc.stdout and "(2 components)" in proc.stdout
