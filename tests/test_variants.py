"""False hits' rules without a compile (issue 37): the options, which path stands in for
the local restart, the shared cache's ledger, and the rules re-judged on real phase
records (tests/data/records: `false_hit_custom_pass`, `shared_entry_equal`,
`variants_keyed_miss`, recorded from tests/test_false_hits.py's session; the local
`pass_mlp` record for the other-GPU rule) with one thing changed each time."""
from __future__ import annotations

import argparse
import json
import os
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict

import pytest

from pytest_compilecache import paths
from pytest_compilecache.controller import variants
from pytest_compilecache.options import add_options
from pytest_compilecache.settings import Settings
from test_judges import load, rejudge

# -- options ---------------------------------------------------------------------------


def _parsed(*argv: str) -> Any:
    parser = argparse.ArgumentParser()
    add_options(parser.add_argument)
    return parser.parse_args(list(argv))


def test_warm_on_other_gpu_alone_is_the_index_layout_and_pinned_is_a_mode() -> None:
    assert _parsed("--compile-cache-warm-on-other-gpu").compile_cache_warm_on_other_gpu \
        == "index"
    assert _parsed("--compile-cache-warm-on-other-gpu=pinned").compile_cache_warm_on_other_gpu \
        == "pinned"
    assert _parsed().compile_cache_warm_on_other_gpu is None
    with pytest.raises(SystemExit):
        _parsed("--compile-cache-warm-on-other-gpu=sideways")


@pytest.mark.parametrize("argv, says", [
    (("--compile-cache-warm-on-other-gpu=sideways",),
     "*'sideways': the layouts are index (both GPUs visible, warm on cuda:1) and pinned*"),
    (("--compile-cache-share-variants", "--compile-cache-warm-on-other-gpu"),
     "*each stand in for the local restart: run them in separate sessions*"),
    (("--compile-cache-share-variants", "--compile-cache-manifest-only"),
     "*--compile-cache-share-variants needs the warm-start check; drop "
     "--compile-cache-manifest-only*"),
])
def test_option_combinations_that_cannot_run_are_usage_errors(
        pytester: pytest.Pytester, argv: Any, says: str) -> None:
    result = pytester.runpytest_subprocess("--compile-cache-check", *argv)
    result.stderr.fnmatch_lines([says])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_an_ini_true_is_the_index_layout(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ncompile_cache_warm_on_other_gpu = true\n"
                     "compile_cache_share_variants = false\n")
    pytester.makeconftest("""
        def pytest_configure(config):
            from pytest_compilecache.settings import Settings
            s = Settings.from_config(config)
            print("LAYOUT", repr(s.warm_on_other_gpu), s.share_variants)
    """)
    result = pytester.runpytest_subprocess("-s", "--co")
    result.stdout.fnmatch_lines(["LAYOUT 'index' False"])


@pytest.mark.parametrize("kw, expected", [
    ({}, ["local"]),
    ({"scenarios": (("shared", True),)}, ["shared"]),
    ({"scenarios": (("shared", True),), "via": ("mega", "local")}, ["shared", "mega"]),
    ({"scenarios": (("shared", True),), "via": ("aot",)}, ["shared", "aot"]),
    ({"scenarios": (("other_gpu", "pinned"),)}, ["other_gpu"]),
    ({"scenarios": (("other_gpu", "index"),), "via": ("local", "remote")}, ["other_gpu", "remote"]),
])
def test_a_scenario_stands_in_for_the_local_restart(kw: Dict[str, Any], expected: Any) -> None:
    chosen = paths.for_settings(Settings(**kw), paths.builtin())
    assert [p.name for p in chosen] == expected
    if "shared" in expected or "other_gpu" in expected:  # the local phases, and more
        assert [p.name for p in chosen[0].phases][:2] == ["cold", "warm"]


# -- the shared cache and its ledger -----------------------------------------------------


def test_only_a_function_with_several_variants_gets_a_shared_root(tmp_path: Path) -> None:
    ids = ["t.py::test_f[a]", "t.py::test_f[b]", "t.py::test_g", "t.py::TestC::test_h[x]"]
    groups = variants.groups_of(ids)
    assert groups == {"t.py::test_f": 2, "t.py::test_g": 1, "t.py::TestC::test_h": 1}
    caches = variants.SharedCaches(tmp_path, groups)
    assert caches.root_for("t.py::test_g") is None
    assert caches.root_for("t.py::TestC::test_h[x]") is None
    a, b = caches.root_for("t.py::test_f[a]"), caches.root_for("t.py::test_f[b]")
    assert a is not None and b is not None and a.root.path == b.root.path
    assert stat.S_IMODE(os.stat(a.root.path).st_mode) == 0o700
    assert all((a.root.path / part).is_dir() for part in ("inductor", "triton", "tmp", "phases"))
    assert a.root.tampered() is None


def test_a_shared_root_someone_else_could_write_is_refused(tmp_path: Path) -> None:
    caches = variants.SharedCaches(tmp_path, {"t.py::test_f": 2})
    root = caches.root_for("t.py::test_f[a]")
    assert root is not None
    os.chmod(root.root.path, 0o777)
    with pytest.raises(OSError, match="not this user's private directory"):
        caches.root_for("t.py::test_f[b]")


# -- the false-hit rule on real records ---------------------------------------------------


def _shared(rec: Dict[str, Any]) -> Dict[str, Any]:
    return rec["recs"]["shared"]


def test_a_false_hit_names_the_entry_the_writer_the_difference_and_the_fix() -> None:
    res = rejudge(load("false_hit_custom_pass"))
    [problem] = res.problems
    assert problem.startswith("false hit: this variant (variant [three]) loaded the "
                              "aot_autograd entry ")
    assert "that variant [two] wrote (same key), and 1 more of its entries" in problem
    assert "the variants differ in scale (2.0 -> 3.0), which the key cannot see" in problem
    assert "of its 637 key components, the extension points that are set are " \
        "post_grad_custom_post_pass='fold-scale-v1', equal for both variants" in problem
    assert problem.endswith("or give the variants separate cache dirs")
    assert res.shared["shared_by"] == 2 and res.shared["outputs_equal"] is False
    assert res.verdict == "fail"


def test_a_false_hit_reads_a_line_each_loaded_differs_key_and_fix() -> None:
    """Issue 52 point 5: one line of ~900 characters was not read."""
    from pytest_compilecache.render.lines import failure_lines

    res = rejudge(load("false_hit_custom_pass"))
    first, *rest = res.problems[0].splitlines()
    assert first.startswith("false hit: this variant (variant [three]) loaded the ")
    assert first.endswith("that variant [two] wrote (same key), and 1 more of its entries")
    assert [line.split(":")[0] for line in rest] == [
        "    outputs", "    what differs", "    what the key holds", "    fix"]
    assert rest[1] == ("    what differs: the variants differ in scale (2.0 -> 3.0), which "
                       "the key cannot see")
    assert max(len(line) for line in [first, *rest]) < 300
    report = failure_lines(res)
    at = report.index(next(x for x in report if x.startswith("  false hit: ")))
    assert report[at:at + 5] == [f"  {first}", *(f"  {x}" for x in rest)]


def test_an_entry_loaded_with_equal_outputs_is_sharing_not_a_false_hit() -> None:
    rec = load("false_hit_custom_pass")
    cmp = _shared(rec)["compare_cold"]
    cmp.update(ok=True, mismatches=[])
    res = rejudge(rec)
    assert res.problems == [] and res.verdict == "pass"
    [note] = [n for n in res.notes if n.startswith("shared cache:")]
    assert note.startswith("shared cache: shared by 2 variants: loaded 2 entr(ies) that "
                           "variant [two] wrote")


def test_outputs_that_differ_without_a_loaded_entry_fail_without_blaming_a_variant() -> None:
    rec = load("false_hit_custom_pass")
    _shared(rec)["variants"]["loaded"] = {}
    res = rejudge(rec)
    [problem] = res.problems
    assert problem.startswith("shared cache: its outputs over the shared cache differ from its "
                              "own private cold run's in 1 tensor(s)")
    assert "although it loaded no entry another variant wrote" in problem
    assert "false hit" not in problem


def test_a_turn_without_a_comparison_fails() -> None:
    rec = load("shared_entry_equal")
    _shared(rec)["compare_cold"] = None
    res = rejudge(rec)
    assert res.problems == ["shared cache: the turn over the cache the variants share made no "
                            "comparison with this variant's own cold run"]


def test_variants_that_miss_each_other_say_which_components_kept_them_apart() -> None:
    res = rejudge(load("variants_keyed_miss"))
    assert res.problems == []
    [note] = [n for n in res.notes if n.startswith("shared cache:")]
    assert "loaded none of the entries the other variants wrote" in note
    assert "differ in post_grad_custom_post_pass" in note


def test_a_check_without_a_shared_turn_says_it_had_nothing_to_share() -> None:
    rec = load("shared_entry_equal")
    del rec["recs"]["shared"]
    res = rejudge(rec)
    assert res.problems == []
    assert any("no other variant of this test function is checked" in n for n in res.notes)


# -- another GPU: a fresh compile there is the warm run's reference -----------------------


def _on_two_gpus(visible: str = "1") -> Dict[str, Any]:
    """pass_mlp's phases as if cold ran on GPU 0 and warm and fresh on GPU 1, each alone
    as cuda:0 (the pinned layout): the warm record, again, as the fresh compile's."""
    rec = load("pass_mlp")
    recs = rec["recs"]
    for phase, gpu in (("cold", "0"), ("warm", visible)):
        recs[phase].update(device="cuda", cuda_index=0, cuda_visible=gpu,
                           device_name="NVIDIA H100 80GB HBM3")
    recs["fresh"] = json.loads(json.dumps(recs["warm"]))
    return rec


def test_the_fresh_compile_runs_only_where_the_warm_run_loaded_entries() -> None:
    from pytest_compilecache.paths.other_gpu import OtherGpu

    rec = _on_two_gpus()
    path = OtherGpu()
    assert path.goes_on(rec["recs"]["warm"])
    for events in rec["recs"]["warm"]["cache"]["graphs"].values():
        for layer in ("fx_graph", "aot_autograd"):
            for e in events[layer]:
                e["state"] = "miss"
    assert not path.goes_on(rec["recs"]["warm"])
    assert path.goes_on(rec["recs"]["cold"])


def test_a_warm_run_that_agrees_with_a_fresh_compile_on_its_gpu_passes_naming_both() -> None:
    res = rejudge(_on_two_gpus(), via="other_gpu")
    assert res.verdict == "pass", res.problems
    assert any(n.startswith("the warm run on GPU 1 (cuda:0, NVIDIA H100 80GB HBM3) loaded "
                            "2 entr(ies) built on GPU 0 (cuda:0, NVIDIA H100 80GB HBM3)")
               for n in res.notes), res.notes
    assert res.outputs["fresh_vs_warm"]["ok"] is True


def _differs(rec: Dict[str, Any], phase: str) -> None:
    """The phase's comparison with its reference, failed on the MLP's output."""
    rec["recs"][phase]["compare_cold"].update(ok=False, mismatches=[
        {"name": "call0:MLP", "message": "differs (max abs diff 0.5)", "max_abs_diff": 0.5}])


def test_a_warm_run_that_differs_from_a_fresh_compile_on_its_gpu_is_a_false_hit() -> None:
    rec = _on_two_gpus()
    _differs(rec, "fresh")
    res = rejudge(rec, via="other_gpu")
    assert res.verdict == "fail"
    [problem] = res.problems
    assert "the warm run on GPU 1 (cuda:0, NVIDIA H100 80GB HBM3)" in problem
    assert "differs from a fresh compile on GPU 1 (cuda:0, NVIDIA H100 80GB HBM3)" in problem
    assert "a key blind to the device (pytorch#188390)" in problem


def test_warm_against_cold_on_another_gpu_is_information_where_the_fresh_compile_agrees() -> None:
    rec = _on_two_gpus()
    _differs(rec, "warm")
    res = rejudge(rec, via="other_gpu")
    assert res.verdict == "pass", res.problems
    assert any(n.startswith("warm differs from cold (") and "a fresh compile there agrees" in n
               for n in res.notes), res.notes
    # without the fresh compile it stays the local restart's problem
    del rec["recs"]["fresh"]
    assert rejudge(rec, via="other_gpu").verdict == "fail"


def test_the_check_item_keeps_its_parameters(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.compile_cache
        @pytest.mark.parametrize("scale", [2.0, object], ids=["two", "obj"])
        def test_f(scale):
            pass
    """)
    pytester.makeconftest("""
        import pytest

        @pytest.hookimpl(trylast=True)
        def pytest_collection_finish(session):
            for item in session.items:
                print("ITEM", item.name, getattr(item, "params_id", None),
                      getattr(item, "params", None))
    """)
    result = pytester.runpytest_subprocess("-s", "--co", "--compile-cache-check")
    result.stdout.fnmatch_lines(["ITEM test_f[two] two {'scale': '2.0'}",
                                 "ITEM test_f[obj] obj {'scale': \"<class 'object'>\"}"])


def test_seen_by_keeps_the_ledger_small() -> None:
    ledger = variants.Ledger({f"k{i}": {"layer": "fx_graph", "graph": "0/0",
                                        "writer": {"nodeid": "t[a]"}} for i in range(40)})
    seen = variants.seen_by(ledger, {"cache": {"graphs": {}}},
                            variants.Variant("t[b]", "b", {}))
    assert len(seen["not_loaded"]) == 16 and seen["loaded"] == {}
    assert SimpleNamespace(**seen).writers == ["t[a]"]


def test_under_v_the_summary_shows_what_a_passing_shared_turn_noted() -> None:
    """Issue 52 point 5: the shared turn's notes were only in the JSON report. The
    summary prints from the checks' rows (their results are spooled): the row keeps them."""
    from pytest_compilecache.render.lines import summary_lines

    rec = load("false_hit_custom_pass")
    _shared(rec)["compare_cold"].update(ok=True, mismatches=[])
    res = rejudge(rec)
    assert res.verdict == "pass"
    verbose = summary_lines([res.summary_row()], verbose=True)
    at = verbose.index("notes of passing checks:")
    assert verbose[at + 1].startswith(f"  {res.label}: shared cache: shared by 2 variants: "
                                      f"loaded 2 entr(ies) that variant [two] wrote")
    assert "notes of passing checks:" not in summary_lines([res.summary_row()])


@pytest.mark.parametrize("layout", ["index", "pinned"])
def test_the_other_gpu_path_carries_its_layout_to_the_leases(layout: str) -> None:
    # the lease reads the layout from the path the scenario planned, not from a flag
    from pytest_compilecache.settings import Settings

    chosen = paths.for_settings(Settings(scenarios=(("other_gpu", layout),)), paths.builtin())
    assert [(p.name, p.gpu_layout) for p in chosen] == [("other_gpu", layout)]
    [local] = paths.for_settings(Settings(), paths.builtin())
    assert local.gpu_layout == ""  # the local restart plans no phase on another GPU
