"""Manifest comparison semantics (pure; the sessions in test_drift.py produce real ones)."""
from pytest_compilecache.history import manifest as mf
from pytest_compilecache.terms import environment


def entry(**graphs):
    return {"verdict": "pass", "graphs": {
        gid: {"layer": gid.split(":")[0], "key": key,
              "components": [[name, h, value] for name, h, value in comps]}
        for gid, (key, comps) in graphs.items()}}


BASE = entry(**{"fx_graph:0/0": ("f1", [("gm", "g1", "a\\nb = x * 2.0"),
                                         ("inductor_config[x]", "c1", "True")])})


def test_same_keys_are_unchanged_and_missing_sides_are_new_or_gone():
    assert mf.compare_check(BASE, BASE)["status"] == "unchanged"
    assert mf.compare_check(None, BASE)["status"] == "new"
    assert mf.compare_check(BASE, None)["status"] == "gone"


def test_a_check_with_no_keys_at_either_side_is_not_unchanged():
    bypassed = entry()  # torch bypassed the caches at both commits: no key recorded
    cmp = mf.compare_check(bypassed, bypassed)
    assert cmp["status"] == "no keys"
    assert mf.drift_lines("t.py::test_bypass", cmp)[0].startswith("no keys")
    assert not mf.differs({"checks": {"t": bypassed}}, {"checks": {"t": bypassed}}, ["t"])


def test_drift_lists_components_by_hash_and_diffs_graph_code():
    head = entry(**{"fx_graph:0/0": ("f2", [("gm", "g2", "a\\nb = x * 3.0"),
                                             ("inductor_config[x]", "c1", "True")])})
    cmp = mf.compare_check(BASE, head)
    assert cmp["status"] == "drifted"
    (g,) = cmp["graphs"]
    assert [c["component"] for c in g["components"]] == ["gm"]
    assert "-b = x * 2.0" in g["graph_code_diff"] and "+b = x * 3.0" in g["graph_code_diff"]


def test_allow_list_accepts_only_matching_components():
    head = entry(**{"fx_graph:0/0": ("f3", [("gm", "g1", "a\\nb = x * 2.0"),
                                             ("inductor_config[x]", "c2", "False")])})
    assert mf.compare_check(BASE, head, ["inductor_config[*]"])["status"] == "accepted"
    assert mf.compare_check(BASE, head, ["gm"])["status"] == "drifted"
    assert mf.compare_check(BASE, head, ["*"])["status"] == "accepted"


def test_a_graph_that_appears_is_drift_not_acceptable_by_pattern():
    same = ("f1", [("gm", "g1", "a\\nb = x * 2.0"), ("inductor_config[x]", "c1", "True")])
    head = entry(**{"fx_graph:0/0": same, "fx_graph:1/0": ("f9", [("gm", "g9", "c")])})
    cmp = mf.compare_check(BASE, head, ["*"])
    assert cmp["status"] == "drifted"
    assert [g["change"] for g in cmp["graphs"]] == ["graph added"]


def test_environment_id_is_readable_and_distinguishes_gpus():
    a = environment({"torch": "2.11.0+cu130", "python": "3.12.3", "cuda": "13.0", "triton": "3.6.0"},
                    "cuda", "NVIDIA H200")
    b = dict(a, device_name="NVIDIA H100")
    assert mf.environment_id(a).startswith("torch2.11.0+cu130-NVIDIA_H200-py3.12.3-")
    assert mf.environment_id(a) != mf.environment_id(b)


def test_changed_components_skip_accepted_graphs_and_name_structural_changes():
    head = entry(**{"fx_graph:0/0": ("f3", [("gm", "g1", "a\\nb = x * 2.0"),
                                             ("inductor_config[x]", "c2", "False")])})
    accepted = mf.compare_check(BASE, head, ["inductor_config[*]"])
    assert mf.changed_components(accepted) == ["inductor_config[x]"]
    assert mf.changed_components(accepted, include_accepted=False) == []
    same = ("f1", [("gm", "g1", "a\\nb = x * 2.0"), ("inductor_config[x]", "c1", "True")])
    added = mf.compare_check(BASE, entry(**{"fx_graph:0/0": same,
                                            "fx_graph:1/0": ("f9", [("gm", "g9", "c")])}))
    assert mf.changed_components(added) == ["graph added"]


def test_an_equal_key_whose_digest_differs_is_no_drift_where_a_side_kept_only_its_digest():
    """A lean report keeps a passing graph's digest only; the digest also covers the
    printed values, which may differ where every hash is equal."""
    from pytest_compilecache.layers import keys

    head = entry(**{"fx_graph:0/0": ("f1", [("gm", "g1", "a\\nb = x * 2.0"),
                                            ("inductor_config[x]", "c1", "True at 0x7f01")])})
    lean = {"verdict": "pass", "graphs": {"fx_graph:0/0": {
        "layer": "fx_graph", "key": "f1",
        "components_digest": keys.components_digest(BASE["graphs"]["fx_graph:0/0"]["components"])}}}
    assert mf.digest_of(lean["graphs"]["fx_graph:0/0"]) != mf.digest_of(head["graphs"]["fx_graph:0/0"])
    assert mf.compare_check(lean, head, load_old=lambda row: None)["status"] == "unchanged"
    # with both sides loaded, the hashes decide: equal here
    assert mf.compare_check(BASE, head)["status"] == "unchanged"
