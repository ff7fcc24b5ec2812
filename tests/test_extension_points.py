"""A new cache layer is one class and one `layers.register` line: the toy layer below,
defined here and nowhere else in the package, is judged from a recorded phase record
(tests/data/records/pass_mlp.json) and gets its column in the terminal table
(render/lines.py), its entry
in the JSON report and its column in the job summary, without a change to any other
module (the verdict, the renderers and the report read the registry)."""
from __future__ import annotations

import json
from typing import Any, Dict, Iterator, List, Tuple

import pytest

from pytest_compilecache import layers
from pytest_compilecache.layers.base import CacheLayer, LayerInputs
from pytest_compilecache.model import CheckResult, LayerVerdict
from pytest_compilecache.render import lines, markdown, report


class ToyBundles(CacheLayer):
    """A made-up layer: the Triton kernels an FX-graph hit unpacks from its entry. It
    owns the `.toybundle` files, and hits where the warm run hit an FX graph."""
    name, short, short_md = "toy_bundle", "bundle", "bundle"
    observed = "the FX graph cache's lookups (recorded for the fx_graph layer)"
    suffixes = (".toybundle",)

    def judge(self, inputs: LayerInputs) -> Tuple[LayerVerdict, List[str]]:
        hits = [e for e in inputs.warm.entries("fx_graph") if e.state == "hit"]
        lv = LayerVerdict(state="hit" if hits else "n/a",
                          cold=f"{len(inputs.cold_files)} bundle(s) written",
                          warm=f"{len(hits)} bundle(s) unpacked")
        if not hits:
            lv.reasons = ["the warm run hit no FX graph"]
        return lv, []


@pytest.fixture
def toy() -> Iterator[CacheLayer]:
    builtin = layers.REGISTRY
    layer = ToyBundles()
    layers.register(layer)
    try:
        yield layer
    finally:
        layers.use(builtin)


def _record() -> Dict[str, Any]:
    from test_judges import load

    return load("pass_mlp")


def _judged(rec: Dict[str, Any]) -> CheckResult:
    from test_judges import rejudge

    return rejudge(rec)


def test_a_registered_layer_is_judged_from_a_recorded_record(toy: CacheLayer) -> None:
    rec = _record()
    res = _judged(rec)
    assert list(res.layers) == list(layers.LAYERS) == ["dynamo_pgo", "aot_autograd", "fx_graph",
                                                       "kernels", "autotune", "toy_bundle"]
    lv = res.layers["toy_bundle"]
    assert (lv.state, lv.cold, lv.warm) == ("hit", "0 bundle(s) written", "1 bundle(s) unpacked")
    # the layers the session recorded judge as it did, and the check still passes
    assert res.verdict == "pass" and not res.problems
    for name, want in rec["expected"]["layers"].items():
        assert (res.layers[name].state, res.layers[name].reasons) == \
            (want["state"], want["reasons"])


def test_its_column_is_in_the_terminal_table_the_json_report_and_the_job_summary(
        toy: CacheLayer) -> None:
    res = _judged(_record())
    head, row = lines.summary_lines([res])[:2]
    cols = head.split()
    assert cols[cols.index("autotune") + 1] == "bundle", head
    assert row.split()[2:8] == ["off", "hit", "hit", "hit", "n/a", "hit"], row
    doc = json.loads(json.dumps(report.build_report([res], {}, "0")))
    assert doc["checks"][0]["layers"]["toy_bundle"]["state"] == "hit"
    assert res.to_json()["layers"]["toy_bundle"]["warm"] == "1 bundle(s) unpacked"
    md_head, md_rule, md_row = markdown.table([res])
    assert "| autotune | bundle | cold s |" in md_head
    assert md_rule.count("---|") == md_head.count("|") - 1
    assert md_row.count("|") == md_head.count("|")


def test_a_file_the_warm_run_wrote_under_its_claim_is_its_miss(toy: CacheLayer) -> None:
    rec = _record()
    rec["snaps"]["warm"]["inductor/zz/kernel.toybundle"] = 100
    assert layers.layer_of("inductor/zz/kernel.toybundle") == "toy_bundle"
    res = _judged(rec)
    lv = res.layers["toy_bundle"]
    assert (lv.state, lv.files) == ("miss", ["inductor/zz/kernel.toybundle"])
    assert res.verdict == "fail"
    assert res.problems == ["toy_bundle: miss - the warm run wrote 1 new file(s) for this layer"]
    assert "    warm wrote (toy_bundle): inductor/zz/kernel.toybundle" in lines.failure_lines(res)


def test_without_it_the_registry_is_the_builtin_one() -> None:
    assert layers.LAYERS == ("dynamo_pgo", "aot_autograd", "fx_graph", "kernels", "autotune")
    assert "toy_bundle" not in _judged(_record()).layers
    with pytest.raises(ValueError, match="unique"):
        layers.register(layers.REGISTRY[0])


def test_a_conftest_paths_option_is_in_help_and_its_preflight_stops_the_session(
        pytester: pytest.Pytester) -> None:
    """Issue 39: the toy path of test_path_hook.py, added by its conftest alone, brings an
    option (registered when the conftest loads, with its ini twin) and a preflight that
    stops the session before anything compiles (exit 4, one line naming the fix)."""
    from test_path_hook import CONFTEST, TESTS

    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_toy=TESTS)
    missing = pytester.path / "none"
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--compile-cache-check", "--compile-cache-via=toy",
        f"--compile-cache-toy-marks={missing}", "--compile-cache-launcher=fresh")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()[-2000:]
    result.stderr.fnmatch_lines([f"*--compile-cache-via=toy: --compile-cache-toy-marks="
                                 f"{missing}: no such directory; make it first*"])
    helped = pytester.runpytest_subprocess("--help")
    helped.stdout.fnmatch_lines(["*--compile-cache-toy-marks=DIR*",
                                 "*compile_cache_toy_marks (string)*"])
