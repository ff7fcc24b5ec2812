"""Output comparisons of a check: warm vs cold and compiled vs eager.

Both start elementwise (bitwise for warm vs cold, `torch.testing.assert_close` for
compiled vs eager); a tensor that fails is escalated to PyTorch's own accuracy rule
(`torch._dynamo.utils.same` with `fp64_ref`, used by `benchmarks/dynamo/common.py`):
compare both sides with a float64 eager run, and fail only when the candidate's error
is several times the reference implementation's own. TF32 and reordered atomics then
pass (eager carries the same noise); wrong math does not.

Runs in the child with torch alone: no numpy (torch does not install it).
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

from pytest_compilecache.child.where import on_compare_device
from pytest_compilecache.terms import USABLE_REL, is_gradient

Outputs = Dict[str, Any]  # name -> cpu tensor

# Below this many elements noise dominates an RMSE; torch's `same` uses 3 there too.
SMALL_NUMEL = 1000
# The floor of the rule, relative to the float64 output's RMS: an error below 0.01%
# of the values' size is arithmetic noise whatever eager's own error (torch's rule
# has an absolute tol/10 instead, which is the whole budget of a small gradient).
FLOOR_REL = 1e-4
# PyTorch's own TF32 test precision (common_cuda.tf32_on_and_off(0.005)): with TF32 the
# compute dtype of float32 convs/matmuls has a 10-bit mantissa.
TF32_TOLERANCE = {"atol": 5e-3, "rtol": 5e-3}
# assert_close's own defaults for the half types (its documented table), the tolerance
# of work that ran under an fp16/bf16 autocast: its float32 outputs (a loss, logits
# under the CPU policy) carry the half type's error, not float32's.
HALF_TOLERANCE = {"float16": {"atol": 1e-5, "rtol": 1e-3},
                  "bfloat16": {"atol": 1e-5, "rtol": 1.6e-2}}
# The half types' unit roundoff (2^-11, 2^-8): the floor of the float64 rule for work
# that ran in one. A value computed there is no more exact than its own rounding, and
# a scalar's error (a loss: one projection of the logits' errors) is a single draw:
# resnet18's first fp16 loss on CPU was 5.6e-4 off for eager, 1.9e-3 for compiled
# (logits: 1.1x eager's error), 3.45x and over `same`'s 3x; under 1 + 3x with this floor.
HALF_ROUNDOFF = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}


def multiplier(t: Any, gradient: bool = False, work_dtype: Any = None) -> float:
    """torch's `same`: 2x eager's error, 3x for half types and small tensors. Gradients
    get 3x too: from noise alone BERT-base's worst gradient reached 2.09x (shared
    accuracy probe) and mobilenet_v3's 1.94x (H100, TF32), while a stale or wrong
    backward measured 13x to 5e6x. So does a float32 tensor computed under a half-type
    autocast (`work_dtype`): its error is the half type's, as in `same`'s AMP runs."""
    if gradient or is_half(t.dtype) or is_half(work_dtype) or t.numel() < SMALL_NUMEL:
        return 3.0
    return 2.0


def is_half(dtype: Any) -> bool:
    """float16 or bfloat16 (a torch.dtype, its name, or None)."""
    return str(dtype).replace("torch.", "") in HALF_TOLERANCE


def work_tolerance(dtype: Any, work_dtype: Any) -> Dict[str, float]:
    """The tolerance of a float32 tensor computed under a half-type autocast: that half
    type's assert_close defaults; {} (the tensor's own defaults) otherwise."""
    if str(dtype) != "torch.float32" or not is_half(work_dtype):
        return {}
    return dict(HALF_TOLERANCE[str(work_dtype).replace("torch.", "")])


def _looser(a: Dict[str, float], b: Dict[str, float]) -> Dict[str, float]:
    """Each bound the looser of two tolerances' ({}: the dtype's own defaults, tighter
    than any here): TF32 and a half-type autocast both in play get both allowances."""
    if not (a and b):
        return a or b
    return {k: max(a[k], b[k]) for k in ("atol", "rtol")}


def against_float64(candidate: Any, baseline: Any, ref: Any,
                    gradient: bool = False, work_dtype: Any = None,
                    amplified: float = 0.0) -> Dict[str, Any]:
    """Is `candidate` as close to the float64 `ref` as `baseline` (same math, other
    kernels) is, up to the multiplier and floor, plus `amplified`: the rounding of
    earlier steps that this value may carry (`amplify`; 0 for a first step)? Both
    errors go in the report, so a user sees how close a check came."""
    import torch

    c, b, r = candidate.double(), baseline.double(), ref.double().to(candidate.device)
    mask = torch.isfinite(r) & torch.isfinite(b)
    bad = bool((mask & ~torch.isfinite(c)).any())
    c, b, r = c[mask], b[mask], r[mask]
    c_err = rms(c - r)
    b_err = rms(b - r)
    scale = rms(r)
    floor = max(FLOOR_REL, HALF_ROUNDOFF.get(str(work_dtype).replace("torch.", ""), 0.0))
    limit = multiplier(candidate, gradient, work_dtype) * b_err + floor * scale + amplified
    ratio = c_err / b_err if b_err > 0 else (0.0 if c_err == 0 else math.inf)
    out = {"rmse": _round(c_err), "reference_rmse": _round(b_err), "limit": _round(limit),
           "ratio": _round(ratio), "ok": not bad and c_err <= limit,
           "reference_rel": _round(b_err / scale if scale else math.inf),
           "usable": b_err <= USABLE_REL * scale}
    if amplified:
        out["amplified"] = _round(amplified)
    return out


def within_noise(warm: Any, cold: Any, ref: Any) -> Dict[str, Any]:
    """Is the difference between warm and cold no larger than the arithmetic noise both
    carry against the float64 `ref`? Symmetric: the budget is the smaller of their two
    errors, so a wrong cold does not excuse a warm that differs from it, nor the reverse."""
    import torch

    w, c, r = warm.double(), cold.double(), ref.double().to(warm.device)
    mask = torch.isfinite(r) & torch.isfinite(w) & torch.isfinite(c)
    w, c, r = w[mask], c[mask], r[mask]
    w_err, c_err, d = rms(w - r), rms(c - r), rms(w - c)
    scale = rms(r)
    limit = multiplier(warm) * min(w_err, c_err) + FLOOR_REL * scale
    # `negligible`: the float64 value is small beside both runs: zero in exact math, each
    # run's error is then its own size, and the noise rule stays a tight one
    return {"diff_rmse": _round(d), "warm_rmse": _round(w_err), "cold_rmse": _round(c_err),
            "limit": _round(limit), "ok": d <= limit, "usable": min(w_err, c_err) <= USABLE_REL * scale,
            "negligible": scale <= USABLE_REL * min(rms(w), rms(c))}


def rms(t: Any) -> float:
    return float(t.pow(2).mean().sqrt()) if t.numel() else 0.0


def _round(x: float) -> float:
    return float(f"{x:.4g}") if math.isfinite(x) else x


def compare_with_eager(compiled: Outputs, eager: Outputs, ref: Optional[Outputs] = None,
                       ref_note: Optional[str] = None,
                       tolerance: Optional[Tuple[float, float]] = None,
                       random: Optional[List[Dict[str, Any]]] = None,
                       amplified: Optional[Dict[str, float]] = None,
                       work_dtype: Any = None) -> Dict[str, Any]:
    """Compiled vs eager of the same code, every output and gradient.

    With an explicit ATOL,RTOL every tensor must be close to it. By default a tensor
    must be close under assert_close's dtype-aware tolerances (TF32's for float32 when
    TF32 is on), or else pass the float64 rule against `ref`. Without a float64
    reference, forward outputs fall back to assert_close and gradients are not gated:
    on CUDA with TF32, resnet18's compiled and eager gradients differ by ~10% by norm
    through BatchNorm backward, and only a float64 run tells that from wrong math.

    `random`: the tensors that change with the random seed (`randomness.seed_dependent`):
    compiled code draws other numbers than eager, so they are not compared here (warm vs
    cold gates them: the same seed and graph draw the same numbers).

    `amplified`: per later value, the rounding of earlier steps it may carry
    (`amplify.allowance`), added to its limit. Tensors of other shapes in the two runs
    were computed from other inputs: not comparable, named, never a mismatch.

    `work_dtype`: the half type the work ran in under autocast (`amp.watch`), or None.
    Its float32 tensors then get that type's tolerance where assert_close decides
    (no float64 run, or none usable) and torch `same`'s half-type multiplier where the
    float64 rule does."""
    skip = {r["name"] for r in random or []}
    tf32 = tolerance is None and tf32_active()
    work = str(work_dtype).replace("torch.", "") if is_half(work_dtype) else None
    tally = _EagerTally(tolerance, tf32, amplified or {}, work)
    for name in in_order(compiled, eager):
        if name not in compiled or name not in eager:
            tally.mismatches.append({"name": name,
                                     "message": "present in only one of compiled/eager"})
        elif name not in skip:
            tally.judge(name, compiled[name], eager[name], (ref or {}).get(name))
    tally.downstream_of_incomparable()
    worst = max(tally.escalated,
                key=lambda v: v["rmse"] / v["limit"] if v["limit"] else math.inf, default=None)
    return {"ok": not tally.mismatches,
            "compared": len(compiled) - len(skip & set(compiled)) - len(tally.incomparable),
            "total": len(compiled), "random": list(random or []),
            "mismatches": tally.mismatches,
            "rule": _eager_rule(tolerance, ref, ref_note, tf32, work), "work_dtype": work,
            "float64": {"available": ref is not None, "note": ref_note,
                        "escalated": tally.escalated, "unusable": tally.unusable,
                        "unusable_miss": _round(tally.unusable_miss), "worst": worst},
            "ungated_gradients": tally.ungated, "gradient_rel_error": tally.grad_err,
            "gradients_gated": tolerance is not None or ref is not None,
            "incomparable": tally.incomparable, "amplified": amplified is not None,
            "within_amplified": tally.amplified_rows}


class _EagerTally:
    """What compare_with_eager finds, tensor by tensor."""

    def __init__(self, tolerance: Optional[Tuple[float, float]], tf32: bool,
                 amplified: Dict[str, float], work: Optional[str] = None) -> None:
        self.tolerance, self.tf32, self.amplified, self.work = tolerance, tf32, amplified, work
        self.incomparable: List[Dict[str, Any]] = []  # other shapes: other inputs
        self._order: List[str] = []
        # judged against eager with the amplified rounding, no float64 run there
        self.amplified_rows: List[Dict[str, Any]] = []
        self.mismatches: List[Dict[str, Any]] = []
        self.escalated: List[Dict[str, Any]] = []
        self.ungated: List[str] = []
        self.unusable: List[str] = []  # the float64 run missed eager too: no reference there
        self.unusable_miss = 0.0  # the largest of eager's relative misses there
        self.grad_err = 0.0

    def judge(self, name: str, c: Any, e: Any, r: Any) -> None:
        """One tensor: close to eager, else the float64 rule where a float64 run can
        judge it, else a mismatch (a gradient without a float64 run is not gated)."""
        import torch

        self._order.append(name)
        if c.shape != e.shape:
            self.incomparable.append({"name": name, "message": (
                f"compiled {str(c.dtype).replace('torch.', '')}{list(c.shape)} vs eager "
                f"{str(e.dtype).replace('torch.', '')}{list(e.shape)}")})
            return
        c, e, r = on_compare_device(c, e, r)
        tolerance = self.tolerance
        amp = self.amplified.get(name, 0.0)
        grad = is_gradient(name) and c.is_floating_point()
        if grad:
            self.grad_err = max(self.grad_err, float((c.double() - e.double()).norm()
                                                     / e.double().norm().clamp_min(1e-30)))
        judged = (tolerance is None and r is not None and c.is_floating_point()
                  and c.shape == e.shape == r.shape)
        loose = _looser(dict(TF32_TOLERANCE) if self.tf32 and c.dtype == torch.float32
                        else {}, work_tolerance(c.dtype, self.work))
        if tolerance is not None:
            kw: Dict[str, float] = {"atol": tolerance[0], "rtol": tolerance[1]}
        else:  # TF32's loose tolerance only where no float64 run can judge: its atol
            kw = {} if judged else loose  # is the whole size of a small gradient
        message = assert_close_message(c, e, kw)
        if message is None:
            return
        v = {"name": name, **against_float64(c, e, r, grad, self.work, amp)} if judged else None
        if v is not None and not v["usable"]:
            self.unusable.append(name)
            self.unusable_miss = max(self.unusable_miss, v["reference_rel"])
            if kw != loose:
                message = assert_close_message(c, e, loose)
                if message is None:
                    return
        elif v is not None:
            self.escalated.append(v)
            if not v["ok"]:
                of = (f", of which {v['amplified']:.3g} for earlier steps' rounding amplified"
                      if v.get("amplified") else "")
                self.mismatches.append({"name": name, "message": (
                    f"compiled is {v['ratio']:.3g}x "
                    f"as far from a float64 run as eager (RMSE {v['rmse']:.3g} vs eager's "
                    f"{v['reference_rmse']:.3g}; allowed {v['limit']:.3g}{of}): wrong math, not "
                    f"rounding noise"), "float64": v})
            return
        if amp and c.is_floating_point():  # no float64 run judges it: eager does, with
            d = rms((c.double() - e.double()).nan_to_num(0))  # the amplified rounding
            row = {"name": name, "rmse": _round(d), "limit": _round(amp), "ok": d <= amp}
            self.amplified_rows.append(row)
            if row["ok"]:
                return
            message += (f"\n(beyond the rounding earlier steps amplify: RMSE {d:.3g} vs eager, "
                        f"allowed {amp:.3g})")
        if grad and tolerance is None:
            self.ungated.append(name)
            return
        if v is not None and name in self.unusable:
            message += (f"\n(its float64 run is no reference: eager misses it by "
                        f"{v['reference_rel']:.0%} RMS, over {USABLE_REL:.0%})")
        self.mismatches.append({"name": name, "message": message})


    def downstream_of_incomparable(self) -> None:
        """What differs after a tensor computed from other inputs (recording order) was
        computed from them too (weights updated on another batch): not comparable
        either, never a mismatch."""
        if not self.incomparable:
            return
        first = self.incomparable[0]["name"]
        after = set(self._order[self._order.index(first) + 1:])
        moved = [m for m in self.mismatches if m["name"] in after]
        self.mismatches = [m for m in self.mismatches if m["name"] not in after]
        self.incomparable += [{"name": m["name"], "message": f"computed after {first}"}
                              for m in moved]


def in_order(first: Outputs, second: Outputs) -> List[str]:
    """Every name of both, in the order the run recorded them (the cold phase's saved
    outputs keep it), so that what came after what can be told."""
    return list(dict.fromkeys([*first, *second]))


def _eager_rule(tolerance: Optional[Tuple[float, float]], ref: Optional[Outputs],
                ref_note: Optional[str], tf32: bool, work: Optional[str] = None) -> str:
    """The rule compiled vs eager was judged by, as the report names it."""
    if tolerance is not None:
        return f"atol={tolerance[0]},rtol={tolerance[1]}"
    if ref is not None:
        return ("assert_close defaults, else float64 reference"
                + (f" ({work} autocast: 3x eager's error; its tolerance where the float64 "
                   f"run is none)" if work else
                   " (TF32 tolerance for float32 where it is none)" if tf32 else ""))
    why = f" (no float64 reference: {ref_note or 'none made'})"
    if work:
        return f"assert_close at {work} autocast's tolerance" + why
    return "assert_close defaults" + (", TF32 tolerance for float32" if tf32 else "") + why


def assert_close_message(c: Any, e: Any, kw: Dict[str, float]) -> Optional[str]:
    import torch

    try:
        torch.testing.assert_close(c, e, equal_nan=True, atol=kw.get("atol"), rtol=kw.get("rtol"))
    except AssertionError as exc:
        return "\n".join(str(exc).strip().splitlines()[:6])
    return None


def tf32_active() -> bool:
    import torch

    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return False
    return bool(torch.backends.cudnn.allow_tf32 or torch.backends.cuda.matmul.allow_tf32)
