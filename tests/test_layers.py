"""The cache layers, one module each behind layers.base.CacheLayer: the registry the
report's columns, the manifest's keyed layers and the attribution of a cache root's files
derive from, and each layer's rule reached through it. Fast: real recorded records."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_compilecache import layers
from pytest_compilecache.layers.base import CacheLayer, LayerInputs, TorchConfigs
from pytest_compilecache.model import LayerVerdict
from pytest_compilecache.wire import CacheRecord, PhaseRecord

RECORDS = Path(__file__).parent / "data" / "records"

# a cache root's files as real phases wrote them (CPU and GPU), and the layer of each
OWNED = [
    ("triton/0/3fd0/triton_poi_fused_relu_0.cubin", "kernels"),
    ("tmp/precompiled_headers/2a/c10.h.gch", "kernels"),
    ("tmp/torchinductor_root/other.txt", "other"),
    ("inductor/fxgraph/xy/fxyzkey/0", "fx_graph"),
    ("inductor/aotautograd/akey/entry", "aot_autograd"),
    ("inductor/dynamo/code_state_model.py:3:forward.pkl", "dynamo_pgo"),
    ("inductor/triton/0/k/triton_.best_config", "kernels"),  # Triton's dir first
    ("inductor/cache/7f3a", "autotune"),
    ("inductor/zq/czqabc.best_config", "autotune"),
    ("inductor/zq/czqabc.py", "fx_graph"),
    ("inductor/zq/czqabc.so", "kernels"),
    ("inductor/zq/czqabc.cpp", "kernels"),
    ("inductor/zq/notes.txt", "other"),
    ("inductor", "other"),
]


@pytest.mark.parametrize("path, layer", OWNED)
def test_each_file_belongs_to_the_layer_that_writes_it(path: str, layer: str) -> None:
    assert layers.layer_of(path) == layer


def test_every_recorded_file_is_owned_by_one_layer_at_most() -> None:
    """Each path real phases wrote is claimed by the layer that owns its directory, or,
    outside one, by the only layer whose file names it matches."""
    seen = 0
    for f in RECORDS.glob("*.json"):
        for snap in json.loads(f.read_text()).get("snaps", {}).values():
            for path in snap:
                parts = path.split("/")
                by_dir = [x.name for x in layers.REGISTRY if x.owns_top(parts)
                          or (len(parts) > 1 and parts[1] in x.heads)]
                by_name = [x.name for x in layers.REGISTRY
                           if x.suffixes and parts[-1].endswith(x.suffixes)]
                assert len(set(by_name)) <= 1, (path, by_name)
                assert layers.layer_of(path) == (by_dir or by_name or ["other"])[0], path
                seen += 1
    assert seen > 100


def test_the_registry_is_what_the_report_and_the_manifest_derive_from() -> None:
    assert layers.LAYERS == ("dynamo_pgo", "aot_autograd", "fx_graph", "kernels", "autotune")
    assert layers.KEYED == ("aot_autograd", "fx_graph")
    for layer in layers.REGISTRY:
        assert isinstance(layer, CacheLayer)
        assert layer.short and layer.short_md and layer.observed, layer.name
        assert type(layer).judge is not CacheLayer.judge, layer.name
        assert layers.SHORT[layer.name] == layer.short


def test_each_layers_rule_judges_a_real_record_through_the_registry() -> None:
    """The plain MLP's cold and warm records (tests/data/records/pass_mlp.json): every
    layer's rule, reached through its module, gives the state the session reported."""
    case = json.loads((RECORDS / "pass_mlp.json").read_text())
    cold, warm = (PhaseRecord.from_json(case["recs"][p]) for p in ("cold", "warm"))
    cold_files = layers.by_layer(case["snaps"]["cold"])
    for layer in layers.REGISTRY:
        lv, notes = layer.judge(LayerInputs(
            cold.cache, warm.cache, warm.cache.layer_config.get(layer.name),
            cold_files.get(layer.name, [])))
        assert isinstance(lv, LayerVerdict) and isinstance(notes, list)
        assert lv.state == case["expected"]["layers"][layer.name]["state"], layer.name
    # and a rule sees what it is given: no cold files, no cold events -> not in play
    empty = LayerInputs(CacheRecord(), CacheRecord())
    assert layers.REGISTRY[3].judge(empty)[0].state == "n/a"  # kernels


def _configs(**kw: object) -> TorchConfigs:
    from types import SimpleNamespace as NS

    base = dict(version="2.13.0", job_id="job",
                inductor=NS(fx_graph_cache=True, autotune_local_cache=True),
                functorch=NS(enable_autograd_cache=True),
                dynamo=NS(automatic_dynamic_local_pgo=True), force_disabled=False)
    base.update(kw)
    return TorchConfigs(**base)  # type: ignore[arg-type]


def test_each_layer_says_whether_torch_enables_it_and_why_not() -> None:
    """Each layer's own config rule over torch's config modules (the child reads them
    once, child/probe.layer_config): this torch's defaults, then each switch off."""
    from types import SimpleNamespace as NS

    def states(cfgs: TorchConfigs) -> dict:
        return {x.name: x.config(cfgs) for x in layers.REGISTRY if x.config(cfgs)}

    on = states(_configs())
    assert set(on) == {"dynamo_pgo", "aot_autograd", "fx_graph", "autotune"}
    assert all(s == {"enabled": True, "why": None} for s in on.values()), on
    fx = "torch._inductor.config.fx_graph_cache"
    off = states(_configs(inductor=NS(fx_graph_cache=False, autotune_local_cache=False),
                          origins={fx: "environment"}))
    assert off["fx_graph"] == {
        "enabled": False, "off": True, "in_code": False, "setting": f"{fx} = False",
        "why": f"{fx} = False, from the environment variable TORCHINDUCTOR_FX_GRAPH_CACHE "
               f"(every restart compiles its FX graphs, and AOTAutograd's with them, again; "
               f"unset it for a warm start)"}
    # AOT needs the FX cache: off for it, its own switch not blamed
    assert off["aot_autograd"]["off"] and not off["aot_autograd"].get("in_code")
    assert off["aot_autograd"]["why"].startswith(
        f"off because the FX graph cache is off ({fx} = False, from the environment variable "
        f"TORCHINDUCTOR_FX_GRAPH_CACHE)")
    assert off["autotune"]["why"] == ("torch._inductor.config.autotune_local_cache = False, "
                                      "torch 2.13.0's default")
    old = states(_configs(functorch=None, dynamo=NS(), version="2.5.1"))
    assert old["aot_autograd"]["why"] == "torch 2.5.1 has no AOTAutograd cache config"
    assert old["dynamo_pgo"]["why"] == "torch 2.5.1 has no local PGO (2.6+)"
    assert states(_configs(job_id=None))["dynamo_pgo"]["no_job_id"] is True
    forced = states(_configs(force_disabled=True, job_id=None))
    assert all("force-disabled" in s["why"] for s in forced.values()), forced


def test_the_child_reads_this_torchs_config_through_the_layers() -> None:
    from pytest_compilecache.child.probe import layer_config

    cfg = layer_config()
    assert cfg["fx_graph"] == {"enabled": True, "why": None}
    assert set(cfg) == {"dynamo_pgo", "aot_autograd", "fx_graph", "autotune"}


def test_the_child_tells_a_switch_set_in_code_from_torchs_default() -> None:
    """child/settings.py on this torch's real config: a switch set between the
    workload's start and end was set during the phase, one set before it in code
    (a conftest), and one nobody set is torch's default; the layers' config then says
    so, and set in code, the record fails the check (`in_code`)."""
    import contextvars

    import torch._inductor.config as inductor

    from pytest_compilecache.child.probe import layer_config
    from pytest_compilecache.child.settings import SwitchWatch
    from pytest_compilecache.layers.fx_graph import FX_GRAPH_CACHE

    watch = SwitchWatch(s for layer in layers.REGISTRY for s in layer.switches)
    fx = FX_GRAPH_CACHE.setting
    watch.start()
    assert watch.origins()[fx] == "default"
    assert layer_config(watch.origins())["fx_graph"] == {"enabled": True, "why": None}

    def body() -> None:  # torch keeps a value set in code per context: this one's only
        inductor.fx_graph_cache = False
        cfg = layer_config(watch.origins())
        assert watch.origins()[fx] == "phase"
        assert cfg["fx_graph"]["in_code"] and cfg["fx_graph"]["off"]
        assert cfg["fx_graph"]["why"].startswith(f"{fx} = False, set in the test's code during "
                                                 f"the phase: a service")
        assert cfg["aot_autograd"]["setting"] == f"{fx} = False" \
            and not cfg["aot_autograd"].get("in_code")
        watch.start()  # as a conftest's setting: made before the workload began
        assert watch.origins()[fx] == "code"
        assert layer_config(watch.origins())["fx_graph"]["in_code"]

    contextvars.copy_context().run(body)
    assert inductor.fx_graph_cache is True


def test_caches_force_disabled_around_the_warm_compile_name_the_setting() -> None:
    """Issue 53 point 8: `with torch._inductor.config.patch(force_disable_caches=True)`
    around the warm run's compile leaves no cache event and is off again when the
    workload ends: the check failed with `aot_autograd: miss - the warm run made no
    lookup although cold did`, naming no setting. Seen at the compile's start (a real
    compile, this torch), the layers are off, set in code, and the failure names it."""
    import torch

    from pytest_compilecache.child.probe import layer_config
    from pytest_compilecache.child.settings import SwitchWatch
    from pytest_compilecache.layers.keyed import keyed_layer
    from pytest_compilecache.wire import LayerConfig

    watch = SwitchWatch(s for layer in layers.REGISTRY for s in layer.switches)
    watch.start()
    try:
        with torch._inductor.config.patch(force_disable_caches=True):
            torch.compile(lambda x: x * 3 + 1)(torch.ones(4))
    finally:
        watch.stop()
    setting = "torch._inductor.config.force_disable_caches"
    assert watch.forced_while_compiling == setting
    assert layer_config(watch.origins())["fx_graph"] == {"enabled": True, "why": None}
    cfg = layer_config(watch.origins(), watch.forced_while_compiling)
    for name in ("aot_autograd", "fx_graph"):
        assert cfg[name]["in_code"] and cfg[name]["setting"] == f"{setting} = True"
        assert cfg[name]["why"].startswith(f"{setting} = True while the workload compiled, "
                                           f"set by the test's code around the compile")
    cold = CacheRecord.from_json({"graphs": {"0/0": {"aot_autograd": [
        {"key": "a1", "state": "miss", "compile_id": "0/0"}]}}})
    config = LayerConfig.from_json(cfg["aot_autograd"])
    lv = keyed_layer("aot_autograd", cold, CacheRecord(), config, set(), False)
    aot = next(layer for layer in layers.REGISTRY if layer.name == "aot_autograd")
    [problem] = aot.problems(lv, config)
    assert problem.startswith(f"aot_autograd: off - {setting} = True while the workload")
    watch.start()  # the next workload starts unseen, and one watch at a time
    torch.compile(lambda x: x * 5 + 1)(torch.ones(4))
    watch.stop()
    assert watch.forced_while_compiling is None
