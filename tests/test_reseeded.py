"""The rule over the reseeded restart (judge/reseeded.py), on records shaped as the
slow test's real ones (tests/test_drawn_constants.py): torch 2.13 keys a graph by `gm`
(its code, where a drawn float is a literal) and `example_inputs[i]` (an input's shape
and dtype). A key drifted in the code alone is a drawn constant: the check fails naming
the changed line; one whose inputs changed is the test's own data: a note."""
from __future__ import annotations

from typing import List, Tuple

from pytest_compilecache.judge.reseeded import drew_in_the_test, judge_reseeded, unjudged
from pytest_compilecache.model import CheckResult, LayerVerdict
from pytest_compilecache.wire import PhaseRecord

# the FX graph code of test_jittered_temperature's cold and reseeded phases, as keyed
CODE = "def forward(self, addmm):\\n    div_tensor = torch.ops.aten.div.Tensor(addmm, {})"


def _record(phase: str, state: str, key: str, components: List[Tuple[str, str, str]]
            ) -> PhaseRecord:
    entry = {"state": state, "key": key, "compile_id": "0/0",
             "components": [list(c) for c in components]}
    return PhaseRecord.from_json({"phase": phase, "drew": ["random"], "cache": {"graphs": {
        "0/0": {"fx_graph": [entry], "aot_autograd": []}}}})


def _judged(reseeded: PhaseRecord) -> CheckResult:
    cold = _record("cold", "miss", "fa", [("gm", "g1", CODE.format(1.0844)),
                                         ("example_inputs[0]", "i1", "[4, 8]")])
    res = CheckResult(nodeid="t.py::t", verdict="pass")
    res.layers["fx_graph"] = LayerVerdict(state="hit")
    judge_reseeded(res, cold, reseeded)
    return res.finalize()


def test_a_key_drifted_in_the_graph_code_alone_is_a_drawn_constant() -> None:
    res = _judged(_record("reseeded", "miss", "fb", [("gm", "g2", CODE.format(1.0134)),
                                                     ("example_inputs[0]", "i1", "[4, 8]")]))
    assert res.verdict == "fail" and res.layers["fx_graph"].state == "miss"
    (problem,) = res.problems
    assert problem.startswith("fx_graph: miss - a restart whose draws from Python's `random`")
    assert "gm (graph code differs)" in problem and "aten.div.Tensor(addmm, 1.0134)" in problem
    assert "random.Random(seed)" in problem


def test_a_key_drifted_in_its_inputs_is_the_tests_data() -> None:
    res = _judged(_record("reseeded", "miss", "fb", [("gm", "g1", CODE.format(1.0844)),
                                                     ("example_inputs[0]", "i2", "[9, 8]")]))
    assert res.verdict == "pass" and res.layers["fx_graph"].state == "hit"
    assert "computed on other inputs (1 graph(s)" in res.notes[0], res.notes


def test_a_hit_under_other_draws_says_nothing() -> None:
    res = _judged(_record("reseeded", "hit", "fa", []))
    assert res.verdict == "pass" and not res.notes and not res.problems


def test_a_reseeded_phase_that_failed_is_said_never_a_verdict() -> None:
    failed = CheckResult(nodeid="t.py::t", verdict="error",
                         error="Traceback\n  ...\nAssertionError: n == 42\n")
    text = unjudged("reseeded", failed)
    assert "was not judged" in text and text.endswith("AssertionError: n == 42")


def _phase(drew: List[str], imported: List[str]) -> PhaseRecord:
    return PhaseRecord.from_json({"phase": "p", "drew": drew, "imported_after_seed": imported})


def test_a_draw_beside_a_lazy_import_is_the_tests_only_where_a_clean_phase_drew_too() -> None:
    # a session's first run: the cold phase imported transformers after the seed and saw
    # its import draw; the warm phase's interpreter had it already and saw no draw
    cold = _phase(["random"], ["transformers"])
    assert not drew_in_the_test([cold, _phase([], [])])
    assert drew_in_the_test([cold, _phase(["random"], [])])  # the test draws itself
    # no phase without a lazy import (a fresh launcher): any draw counts
    assert drew_in_the_test([cold, _phase([], ["transformers"])])
    assert drew_in_the_test([_phase(["numpy"], [])])
    assert not drew_in_the_test([_phase([], ["transformers"]), _phase([], [])])
