"""The child's rules for a test body's random state and amplified rounding, on real
torch calls (no session): the compiled run's states are read, never changed; a replay
puts them back at each call; the perturbed run measures what later steps amplify."""
from __future__ import annotations

import random

import torch

from pytest_compilecache.child import amplify, coldcompare, compare, replay
from pytest_compilecache.child.workload import Recorder


def _body(rec: Recorder, fn) -> None:
    """A body: draws before, inside and between two calls, and a re-seed of its own."""
    for i in range(2):
        x = torch.randn(4)
        rec.enter()
        y = fn(x)
        y = rec.leave("f", y)
        rec.record(f"after{i}", y + torch.rand(4) + random.random())
    torch.manual_seed(7)
    rec.record("own", torch.rand(2))


def _run(calls, fn, recorder=None) -> dict:
    rec = recorder or Recorder()
    rec.active, rec.calls = True, calls
    _body(rec, fn)
    return rec.outputs


def test_observing_changes_no_draw_and_a_replay_gives_the_compiled_runs_draws() -> None:
    def compiled(x):  # draws twice as much as eager inside the call (Inductor would)
        return x * torch.rand(4) * torch.rand(4).add(1)

    def eager(x):
        return x * torch.rand(4)

    replay.seed_all(0)
    plain = _run(None, compiled)
    replay.seed_all(0)
    start = replay.capture()
    seen = replay.Observe()
    observed = _run(seen, compiled)
    assert all(torch.equal(plain[k], observed[k]) for k in plain)  # nothing perturbed
    assert len(seen.trail) == 2 and len(seen.digests()) == 2
    replay.restore(start)
    again = _run(replay.Replay(seen.trail), eager)
    # inside the calls eager drew less, yet the draws after each call are the compiled
    # run's: what is computed from them differs only through the call's own output
    for i in range(2):
        diff = observed[f"record:after{i}"] - again[f"record:after{i}"]
        call = observed[f"call{i}:f"] - again[f"call{i}:f"]
        assert torch.allclose(diff, call, atol=1e-6)
    assert torch.equal(observed["record:own"], again["record:own"])  # its own seed holds


def test_the_probe_draws_its_own_numbers_inside_calls_only() -> None:
    def f(x):
        return x + torch.rand(4)

    replay.seed_all(0)
    start = replay.capture()
    seen = replay.Observe()
    ref = _run(seen, f)
    replay.restore(start)
    probe = _run(replay.Replay(seen.trail, inside_seed=99), f)
    assert not torch.equal(ref["call0:f"], probe["call0:f"])
    assert torch.equal(ref["record:own"], probe["record:own"])


def test_a_perturbed_run_moves_later_values_only() -> None:
    w = torch.randn(4, 4, requires_grad=True)

    def step(x):
        return x @ w

    replay.seed_all(0)
    start = replay.capture()
    seen = replay.Observe()
    eager = _run(seen, step)
    replay.restore(start)
    rel = {0: 1e-3, 1: 1e-3}
    rec = Recorder()
    perturbed = _run(replay.Replay(seen.trail, perturb=amplify.Perturb(rel)), step, rec)
    assert not torch.equal(perturbed["record:after0"], eager["record:after0"])
    allowed = amplify.allowance(eager, perturbed, rec.later)
    # the first step keeps its rule: call 0's outputs and what was recorded before the
    # second call (or an optimizer step)
    assert "call0:f" not in allowed and "record:after0" not in allowed, allowed
    assert allowed["record:after1"] > 0  # computed after a second call
    # the noise is the call's rounding size: tiny against the values
    assert allowed["record:after1"] < 1e-2 * compare.rms(eager["record:after1"])


def test_an_optimizer_step_makes_what_follows_a_later_value() -> None:
    w = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([w], lr=0.1)
    rec = Recorder()
    rec.active = True
    with amplify.counting_steps(rec):
        rec.record("before", w * 2)
        (w * 2).sum().backward()
        opt.step()
        rec.record("after", w * 2)
    assert rec.steps == 1 and rec.later == {"record:after"}


def test_noise_keeps_non_finite_elements_and_the_allowance_is_capped() -> None:
    t = torch.tensor([1.0, float("-inf"), 2.0, 3.0])
    out = amplify.Perturb({0: 1e-3})(0, t)
    assert out[1] == float("-inf") and torch.isfinite(out[[0, 2, 3]]).all()
    e = {"record:y": torch.ones(100)}
    p = {"record:y": torch.ones(100) * 2}  # a nudge that moved it by 100% (not smooth)
    [cap] = amplify.allowance(e, p, {"record:y"}).values()
    assert cap == amplify.CAP_REL * 1.0  # never enough to let a 5% error through


def test_a_compiled_module_that_raises_leaves_the_recorder_at_the_top() -> None:
    class Boom(torch.nn.Module):
        def forward(self, x):
            if x.sum() < 0:
                raise ValueError("negative")
            return x * 2

    from pytest_compilecache.child.calls import observe_compiled_calls

    rec = Recorder()
    unpatch = observe_compiled_calls(rec)
    try:
        m = torch.compile(Boom(), backend="eager")
        rec.active = True
        try:
            m(-torch.ones(2))
        except ValueError:
            pass
        m(torch.ones(2))
    finally:
        unpatch()
    assert rec.depth == 0 and list(rec.outputs) == ["call1:Boom"]


def test_a_call_that_computes_wrong_injects_no_more_than_its_rule_allows() -> None:
    eager = {"call0:f": torch.ones(100), "call1:f": torch.ones(100)}
    ref = {k: v.double() for k, v in eager.items()}
    wrong = {"call0:f": torch.ones(100) * 1.05, "call1:f": torch.ones(100) * (1 + 1e-7)}
    sizes = amplify.sizes(wrong, eager, ref)
    assert sizes[0] < 1e-3  # not the 5% the wrong call shows
    assert amplify.sizes(wrong, eager, ref, random={"call0:f"}).get(0) is None


def test_the_amplified_allowance_passes_a_later_value_and_not_a_first() -> None:
    torch.manual_seed(0)
    ref = {"record:loss0": torch.randn(50).double(), "record:loss1": torch.randn(50).double()}
    eager = {k: (v + 1e-6 * torch.randn(50).double()).float() for k, v in ref.items()}
    compiled = {k: (v + 1e-3 * torch.randn(50).double()).float() for k, v in ref.items()}
    plain = compare.compare_with_eager(compiled, eager, ref)
    assert {m["name"] for m in plain["mismatches"]} == {"record:loss0", "record:loss1"}
    amplified = compare.compare_with_eager(compiled, eager, ref, amplified={"record:loss1": 1e-2})
    assert [m["name"] for m in amplified["mismatches"]] == ["record:loss0"]
    # and 5% off is far beyond what the amplified rounding allows
    off = dict(compiled, **{"record:loss1": eager["record:loss1"] * 1.05})
    bad = compare.compare_with_eager(off, eager, ref, amplified={"record:loss1": 1e-2})
    assert "record:loss1" in {m["name"] for m in bad["mismatches"]}
    assert "earlier steps' rounding amplified" in bad["mismatches"][-1]["message"]


def test_other_shapes_are_incomparable_not_mismatches() -> None:
    a, b = {"call0:f": torch.ones(3, 2)}, {"call0:f": torch.ones(5, 2)}
    cold = coldcompare.compare_with_cold(a, b, None)
    assert cold["ok"] and cold["incomparable"][0]["message"] == (
        "cold float32[5, 2] vs warm float32[3, 2]")
    eager = compare.compare_with_eager(a, b)
    assert eager["ok"] and eager["compared"] == 0 and eager["incomparable"]


def _double(x):
    return x * 2


def test_every_way_of_making_a_compiled_callable_is_recorded() -> None:
    """torch._dynamo.optimize(...)(fn), module.compile() and an OptimizedModule's
    dynamo_ctx applied to a method (Lightning's from_compiled), each under its name;
    compiled again or disabled, torch still finds the user's function."""
    from pytest_compilecache.child.calls import observe_compiled_calls

    class Lit(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.lin(x)

        def training_step(self, x):
            return self(x).relu().sum()

    rec = Recorder()
    unpatch = observe_compiled_calls(rec)
    try:
        f = torch._dynamo.optimize("eager")(_double)
        m, lit = torch.nn.Linear(4, 2), Lit()
        m.compile(backend="eager")
        step = torch.compile(lit, backend="eager").dynamo_ctx(lit.training_step)
        again = torch.compile(f, backend="eager")
        rec.active = True
        x = torch.ones(3, 4)
        f(x), m(x), step(x), again(x)
    finally:
        unpatch()
    assert list(rec.outputs) == ["call0:_double", "call1:Linear",
                                 "call2:" + Lit.training_step.__qualname__, "call3:_double"]
    assert torch._dynamo.eval_frame.innermost_fn(again) is f._torchdynamo_orig_callable
