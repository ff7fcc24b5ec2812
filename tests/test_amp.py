"""Mixed precision judged as mixed precision (issue 36): the float64 run of real AMP
training steps on CPU (autocast, GradScaler, SGD/AdamW in their three forms), the
autocast watch, and the tolerance of the dtype the work ran in. No compile, no child."""
from __future__ import annotations

from typing import Any, Dict

import pytest
import torch

from pytest_compilecache.child import amp, compare
from pytest_compilecache.child.float64 import make_mode


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 10))


def _train(dtype: torch.dtype, optimizer: str, form: Dict[str, bool], steps: int = 3,
           truth: bool = False, init_scale: float = 2.0 ** 16) -> Dict[str, torch.Tensor]:
    """A training body as model repos write one: autocast, a GradScaler for float16,
    gradients clipped, an optimizer step per batch; each step's logits and loss. `truth`: the same model
    in float64 throughout, without autocast (scaling by a power of two is exact)."""
    model = _net()
    x = torch.randn(8, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    y = torch.randint(0, 10, (8,), generator=torch.Generator().manual_seed(2))
    if truth:
        model, x = model.double(), x.double()
    opt: Any = {"sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, **form),
                "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2, **form),
                "adam": lambda p: torch.optim.Adam(p, lr=1e-2, weight_decay=0.1, amsgrad=True,
                                                   **form)}[optimizer](model.parameters())
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale,
                                  enabled=dtype == torch.float16 and not truth)
    out = {}
    for step in range(steps):
        with torch.autocast("cpu", dtype=dtype, enabled=not truth):
            logits = model(x)
            loss = torch.nn.functional.cross_entropy(logits, y)
        out[f"logits{step}"], out[f"loss{step}"] = logits.detach(), loss.detach()
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)  # clipping sees true gradients, as the AMP recipe says
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
    return out


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return compare.rms(a.double() - b.double()) / compare.rms(b.double())


def _fused_on_cpu() -> bool:
    try:
        torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], fused=True)
    except RuntimeError:
        return False
    return True


AMP_BODIES = [
    pytest.param(torch.float16, "sgd", {}, id="fp16-gradscaler-sgd-momentum"),
    # weight decay makes the single-tensor step's grad float64 before exp_avg.lerp_(grad)
    pytest.param(torch.float16, "adam", {"foreach": False}, id="fp16-adam-amsgrad-single-tensor"),
    pytest.param(torch.bfloat16, "adamw", {"foreach": True}, id="bf16-adamw-foreach"),
    pytest.param(torch.bfloat16, "adamw", {"foreach": False}, id="bf16-adamw-single-tensor"),
    pytest.param(torch.bfloat16, "adamw", {"fused": True}, id="bf16-adamw-fused",
                 marks=pytest.mark.skipif(not _fused_on_cpu(), reason="no fused AdamW on CPU")),
]


@pytest.mark.parametrize("dtype, optimizer, form", AMP_BODIES)
def test_float64_run_of_amp_training_is_float64_accurate(dtype: torch.dtype, optimizer: str,
                                                          form: Dict[str, bool]) -> None:
    """Measured (torch 2.13 CPU, relative RMS of the logits): the float64 run misses a
    true float64 model by at most 6e-8 (its float32 optimizer state), the fp16 run by
    2.5e-4..1.8e-3, the bf16 run by 2.9e-3..4.4e-3."""
    eager = _train(dtype, optimizer, form)
    with make_mode():  # "inv_scale must be a float tensor", "expected dtype double" before
        ref = _train(dtype, optimizer, form)
    truth = _train(dtype, optimizer, form, truth=True)
    for name in ("logits0", "logits2", "loss2"):
        assert ref[name].dtype == torch.float64
        eager_err, ref_err = _rel(eager[name], truth[name]), _rel(ref[name], truth[name])
        assert ref_err < 1e-6 and ref_err * 100 < eager_err, (name, ref_err, eager_err)
    # the float64 rule then tells wrong math (5% off) from the half type's rounding
    logits = eager["logits2"].float()
    assert compare.against_float64(logits, logits, ref["logits2"], work_dtype=dtype)["ok"]
    assert not compare.against_float64(logits * 1.05, logits, ref["logits2"],
                                       work_dtype=dtype)["ok"]


def test_float64_run_skips_the_steps_a_float16_overflow_made_eager_skip() -> None:
    """A scale too large overflows the float16 backward: GradScaler skips the step. The
    float64 backward does not overflow, so on its own the float64 run would train
    another model; told eager's overflow checks (amp.watch), it skips them too."""
    with amp.watch("cpu") as seen:
        eager = _train(torch.float16, "sgd", {}, init_scale=2.0 ** 24)
    assert seen.found_inf and all(f > 0 for f in seen.found_inf)  # every step skipped
    assert torch.equal(eager["logits0"], eager["logits2"])
    with make_mode():
        alone = _train(torch.float16, "sgd", {}, init_scale=2.0 ** 24)
    with make_mode(found_inf=seen.found_inf):
        ref = _train(torch.float16, "sgd", {}, init_scale=2.0 ** 24)
    assert _rel(eager["logits2"], alone["logits2"]) > 0.05  # another model: no reference
    assert _rel(eager["logits2"], ref["logits2"]) < 1e-3
    assert torch.equal(ref["logits0"], ref["logits2"])


def test_watch_sees_autocast_dtypes_and_changes_nothing() -> None:
    x = torch.randn(4, 4)

    @torch.autocast("cpu", dtype=torch.bfloat16)
    def decorated(t: torch.Tensor) -> torch.Tensor:
        return t @ t

    with amp.watch("cpu") as seen:
        assert seen.dtype is None
        with torch.autocast("cuda", dtype=torch.float16, enabled=False):
            pass
        with torch.autocast("cpu", dtype=torch.float16) as region:
            assert isinstance(region, torch.autocast)  # __enter__'s own return value
            assert (x @ x).dtype == torch.float16
        assert seen.dtype == torch.float16
        assert decorated(x).dtype == torch.bfloat16
    assert seen.dtype == torch.bfloat16  # the loosest of the two
    assert seen.regions == {("cpu", "float16"), ("cpu", "bfloat16")}
    assert torch.autocast.__enter__.__qualname__ == "autocast.__enter__"
    assert torch._amp_foreach_non_finite_check_and_unscale_ is \
        torch._C._VariableFunctions._amp_foreach_non_finite_check_and_unscale_  # put back
    with torch.autocast("cpu", dtype=torch.bfloat16):  # entered before the watch
        with amp.watch() as outer:
            pass
    assert outer.dtype == torch.bfloat16
    with amp.watch("cuda") as other:  # another device's autocast: not this work's
        with torch.autocast("cpu", dtype=torch.bfloat16):
            other.sample()
    assert other.dtype is None


def test_half_autocast_work_gets_its_own_tolerance() -> None:
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(64, 64, dtype=torch.float64, generator=g)
    eager = (ref * (1 + 1e-4 * torch.randn(64, 64, generator=g, dtype=torch.float64))).float()
    compiled = (ref * (1 + 1e-4 * torch.randn(64, 64, generator=g, dtype=torch.float64))).float()
    out, note = {"record:loss": compiled}, "the test body failed in float64: RuntimeError: x"
    # 1e-4 apart (RMS), as float16 work leaves them: float32's tolerance fails them
    assert not compare.compare_with_eager(out, {"record:loss": eager}, None, note)["ok"]
    fp16 = compare.compare_with_eager(out, {"record:loss": eager}, None, note,
                                      work_dtype=torch.float16)
    assert fp16["ok"] and fp16["work_dtype"] == "float16"
    assert fp16["rule"] == ("assert_close at float16 autocast's tolerance (no float64 "
                            "reference: the test body failed in float64: RuntimeError: x)")
    # 5% off fails at bfloat16's tolerance too
    off = compare.compare_with_eager({"record:loss": eager * 1.05}, {"record:loss": eager},
                                     None, note, work_dtype=torch.bfloat16)
    assert not off["ok"] and "bfloat16 autocast" in off["rule"]
    # with a float64 run: same()'s half-type multiplier (3x) for float32 outputs of the
    # work, where float32 work gets 2x
    eager = (ref * (1 + 1e-3 * torch.randn(64, 64, generator=g, dtype=torch.float64))).float()
    between = (ref + 2.6 * (eager.double() - ref)).float()
    assert not compare.compare_with_eager({"o": between}, {"o": eager}, {"o": ref})["ok"]
    amp16 = compare.compare_with_eager({"o": between}, {"o": eager}, {"o": ref},
                                       work_dtype=torch.float16)
    assert amp16["ok"] and amp16["float64"]["escalated"][0]["ratio"] == pytest.approx(2.6)
    assert "float16 autocast: 3x" in amp16["rule"]
    # a scalar computed from float16 logits is a single draw of their rounding: resnet18's
    # first loss on CPU (eager 5.6e-4 off, compiled 1.9e-3) is within float16's roundoff
    loss = torch.tensor(2.4747, dtype=torch.float64)
    eager_loss, compiled_loss = (loss * (1 + 5.6e-4)).float(), (loss * (1 - 1.9e-3)).float()
    assert not compare.against_float64(compiled_loss, eager_loss, loss)["ok"]
    assert compare.against_float64(compiled_loss, eager_loss, loss, work_dtype=torch.float16)["ok"]
    assert not compare.against_float64((loss * 1.05).float(), eager_loss, loss,
                                       work_dtype=torch.bfloat16)["ok"]
