"""A new cache layer is one class and one `layers.register` line: the toy layer below,
defined here and nowhere else in the package, is judged from a recorded phase record
(tests/data/records/pass_mlp.json) and gets its column in the terminal table
(render/lines.py), its entry
in the JSON report and its column in the job summary, without a change to any other
module (the verdict, the renderers and the report read the registry)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Tuple

import pytest

from pytest_compilecache import layers
from pytest_compilecache.layers.base import CacheLayer, LayerInputs
from pytest_compilecache.model import CheckResult, LayerVerdict
from pytest_compilecache.render import lines, markdown, report
from pytest_compilecache.wirejson import Wire


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


@dataclass
class ReluCalls(Wire):
    """The toy observer's record section, typed by its layer."""
    calls: int = 0


class ReluObserver:
    """A layer's own child-side observer: counts F.relu calls in the workload."""

    def __init__(self) -> None:
        self.calls = 0
        self.original: Any = None

    def start(self) -> None:
        import torch.nn.functional as F

        self.original = F.relu

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return self.original(*args, **kwargs)

        F.relu = counted

    def stop(self) -> None:
        import torch.nn.functional as F

        F.relu = self.original

    def record(self, trace: Any) -> Dict[str, Any]:
        return {"calls": self.calls}


class ObservedToy(ToyBundles):
    name = "toy_observed"
    observer = "test_extension_points:ReluObserver"
    section, record_type = "toy_relu", ReluCalls

    def judge(self, inputs: LayerInputs) -> Tuple[LayerVerdict, List[str]]:
        cold, warm = self.section_of(inputs.cold), self.section_of(inputs.warm)
        lv = LayerVerdict(state="hit" if cold and warm and warm.calls <= cold.calls else "miss",
                          cold=f"{cold.calls if cold else '?'} relu", warm=f"{warm.calls} relu")
        return lv, []


def test_a_layers_own_observer_runs_around_the_workload_and_writes_its_section() -> None:
    """The child's CacheObserver starts the layer's observer (named by "module:Class",
    imported in the child only), stops it with the rest, and writes its record under the
    layer's section, which the layer reads back typed."""
    import torch
    import torch.nn.functional as F

    from pytest_compilecache.child.probe import CacheObserver
    from pytest_compilecache.wire import CacheRecord

    builtin, before = layers.REGISTRY, F.relu
    layers.register(ObservedToy())
    try:
        obs = CacheObserver()
        obs.start()
        torch.nn.ReLU()(torch.ones(2))
        F.relu(torch.ones(2))
        obs.stop()
        raw = json.loads(json.dumps(obs.record()))
        layer = layers.REGISTRY[-1]
        assert F.relu is before  # put back at stop
        assert raw["toy_relu"] == {"calls": 2}
        section = layer.section_of(CacheRecord.from_json(raw))
        assert section == ReluCalls(calls=2)
        # the built-in layers' own sections sit beside it
        assert raw["tuning"]["watched"] and "triton_listener" in raw["kernels"]
        inputs = LayerInputs(cold=CacheRecord.from_json(raw), warm=CacheRecord.from_json(
            {**raw, "toy_relu": {"calls": 3}}))
        assert layer.judge(inputs)[0].state == "miss"
    finally:
        layers.use(builtin)


def test_an_observer_that_cannot_be_made_names_its_layer_and_installs_nothing() -> None:
    import logging

    from pytest_compilecache.child.probe import CacheObserver
    from pytest_compilecache.child.tracelog import TRACE_LOGGER

    class Broken(ToyBundles):
        name, observer, section = "toy_broken", "no_such_module_here:Observer", "toy_broken"

    builtin = layers.REGISTRY
    handlers = list(logging.getLogger(TRACE_LOGGER).handlers)
    layers.register(Broken())
    try:
        with pytest.raises(RuntimeError, match="the toy_broken layer's observer "
                                               "'no_such_module_here:Observer' could not"):
            CacheObserver().start()
        assert logging.getLogger(TRACE_LOGGER).handlers == handlers
    finally:
        layers.use(builtin)


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


def test_a_layers_section_may_not_take_another_layers_or_the_records_own_key() -> None:
    class Clash(ToyBundles):
        name, observer, section = "toy_clash", "test_extension_points:ReluObserver", "graphs"

    class Twin(ToyBundles):
        name, observer, section = "toy_twin", "test_extension_points:ReluObserver", "tuning"

    builtin = layers.REGISTRY
    try:
        for layer in (Clash(), Twin()):
            with pytest.raises(ValueError, match="record sections must be unique"):
                layers.register(layer)
            assert layers.REGISTRY == builtin
    finally:
        layers.use(builtin)


@pytest.mark.parametrize("fmt", ["text", "markdown", "github"])
def test_a_report_written_before_a_layer_was_registered_still_renders(
        toy: CacheLayer, fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A stored report (tests/data/report_drift.json) has no entry for a layer
    registered after it was written: `show` prints it in every format, its failures'
    layer rows included, and the new layer's cell is empty ('-'), never a KeyError."""
    from pathlib import Path

    from pytest_compilecache import cli

    drift = Path(__file__).parent / "data" / "report_drift.json"
    assert cli.main(["show", str(drift), "--format", fmt]) == 0
    out = capsys.readouterr().out
    assert "aot_autograd" in out or fmt == "github"
    if fmt == "text":
        assert "fx_graph      hit" in out and "toy_bundle " not in out
