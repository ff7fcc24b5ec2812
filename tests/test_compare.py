"""The output rules and the float64 mode on small tensors (no compile, no child)."""
from __future__ import annotations

import torch

from pytest_compilecache import compare
from pytest_compilecache.float64 import make_mode


def _noisy(t: torch.Tensor, rel: float, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (t + rel * t.abs().mean() * torch.randn(t.shape, generator=g, dtype=t.dtype)).float()


def test_float64_rule_passes_noise_and_fails_wrong_math() -> None:
    ref = torch.randn(64, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    eager, compiled = _noisy(ref, 1e-3, 1), _noisy(ref, 1e-3, 2)  # TF32-sized noise each
    assert compare.against_float64(compiled, eager, ref)["ok"]
    wrong = compare.against_float64(compiled * 1.2, eager, ref)  # a gradient 20% off
    assert not wrong["ok"] and wrong["ratio"] > 10 and wrong["usable"]
    # the relative floor: an error below 0.01% of the values passes even when eager is exact
    assert compare.against_float64(_noisy(ref, 1e-6, 3), ref.float(), ref)["ok"]


def test_a_float64_run_that_eager_misses_is_no_reference() -> None:
    ref = torch.randn(100, dtype=torch.float64)
    garbage = ref * 1e30
    v = compare.against_float64(ref.float() * 3, ref.float(), garbage)
    assert not v["usable"]
    out = compare.compare_with_eager({"grad.w": ref.float() * 3}, {"grad.w": ref.float()},
                                     {"grad.w": garbage})
    assert out["float64"]["unusable"] == ["grad.w"] and out["ungated_gradients"] == ["grad.w"]
    out = compare.compare_with_eager({"output": ref.float() * 3}, {"output": ref.float()},
                                     {"output": garbage})
    assert not out["ok"] and "no reference" in out["mismatches"][0]["message"]


def test_tf32_sized_noise_through_batchnorm_is_still_a_reference() -> None:
    # eager's TF32 error on resnet18's early gradients reached 14% RMS on an H100
    ref = torch.randn(4096, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    eager, compiled = _noisy(ref, 0.14, 1), _noisy(ref, 0.14, 2)
    assert compare.against_float64(compiled, eager, ref, gradient=True)["usable"]
    out = compare.compare_with_eager({"grad.w": compiled}, {"grad.w": eager}, {"grad.w": ref})
    assert out["ok"] and not out["ungated_gradients"] and len(out["float64"]["escalated"]) == 1
    wrong = compare.compare_with_eager({"grad.w": compiled * 2}, {"grad.w": eager}, {"grad.w": ref})
    assert not wrong["ok"] and "float64 run" in wrong["mismatches"][0]["message"]


def test_tf32_tolerance_does_not_wave_through_a_small_wrong_gradient(monkeypatch) -> None:
    # TF32's atol (5e-3) is larger than a small gradient: a float64 run judges instead
    monkeypatch.setattr(compare, "tf32_active", lambda: True)
    ref = 1e-4 * torch.randn(4096, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    eager = _noisy(ref, 1e-3, 1)
    out = compare.compare_with_eager({"grad.w": eager * 2}, {"grad.w": eager}, {"grad.w": ref})
    assert not out["ok"] and out["float64"]["escalated"][0]["ratio"] > 100
    # without a float64 run TF32's tolerance is all there is, and the gradient is not gated
    assert compare.compare_with_eager({"grad.w": eager * 2}, {"grad.w": eager}, None)["ok"]


def test_warm_vs_cold_noise_is_symmetric() -> None:
    ref = torch.randn(4096, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    cold, warm = _noisy(ref, 1e-3, 1), _noisy(ref, 1e-3, 2)
    assert compare.compare_with_cold({"o": warm}, {"o": cold}, None, {"o": ref})["ok"]
    # a right warm against a wrong cold differs beyond the noise either carries
    bad = compare.compare_with_cold({"o": warm}, {"o": cold * 1.5}, None, {"o": ref})
    assert not bad["ok"] and bad["mismatches"][0]["float64"]["diff_rmse"] > 0.1
    # without a float64 reference the rule is bitwise
    assert not compare.compare_with_cold({"o": warm}, {"o": cold}, None, None)["ok"]


def test_digest_reads_bytes_without_numpy() -> None:
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    assert compare.digest(t) == compare.digest(t.clone())
    assert compare.digest(t.t()) == compare.digest(t.t().contiguous())  # values, not layout
    assert compare.digest(t.reshape(3, 2)) != compare.digest(t.t())  # same shape, other values
    assert compare.digest(t) != compare.digest(t.double())
    assert compare.digest(torch.tensor([True, False])) != compare.digest(torch.tensor([False, True]))
    assert len(compare.digest(torch.empty(0))) == 16


def test_float64_mode_keeps_in_place_targets_and_random_draws() -> None:
    torch.manual_seed(0)
    plain = torch.nn.Linear(8, 4)
    x = torch.randn(3, 8)
    torch.manual_seed(0)
    with make_mode():
        built = torch.nn.Linear(8, 4)  # kaiming_uniform_(tensor=...) writes into the weight
        drawn = torch.randn(3, 8)
        y = built(drawn)
        stays = y.float()
        buf = torch.zeros(3, 4)
        buf.add_(y)  # in place into a float32 target
    assert torch.equal(built.weight, plain.weight) and torch.equal(drawn, x)
    assert y.dtype == torch.float64 and stays.dtype == torch.float64
    assert buf.dtype == torch.float32 and torch.allclose(buf.double(), y.detach(), atol=1e-6)
    exact = torch.nn.functional.linear(x.double(), plain.weight.double(), plain.bias.double())
    assert torch.allclose(y, exact, rtol=0, atol=1e-12)
