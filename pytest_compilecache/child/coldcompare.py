"""A later phase's outputs against an earlier one's (warm vs cold; a fresh compile vs its
warm run): bitwise, else within the noise both runs carry against a float64 run, else
within float32's noise floor for a tensor that changes with the seed. Runs in the child
(torch imported inside)."""
from __future__ import annotations

from typing import Any, Collection, Dict, List, Optional, Tuple

from pytest_compilecache.terms import USABLE_REL
from pytest_compilecache.child.bits import same_bits
from pytest_compilecache.child.compare import (FLOOR_REL, Outputs, _round, assert_close_message,
                                               in_order, rms, within_noise)
from pytest_compilecache.child.where import on_compare_device


def compare_with_cold(warm: Outputs, cold: Outputs, tolerance: Optional[Tuple[float, float]],
                      ref: Optional[Outputs] = None, random: Collection[str] = (),
                      labels: Tuple[str, str] = ("warm", "cold")) -> Dict[str, Any]:
    """Warm must equal cold bitwise (or within ATOL,RTOL). A floating tensor that differs
    is escalated to `within_noise`: a nondeterministic kernel (atomic adds in an
    embedding backward: 6.5e-9 in BERT on an H100) differs by less than the rounding
    noise both runs carry; a stale entry does not. A tensor in `random` (it changes with
    the seed) has no float64 run to judge it: the same seed and graph draw the same
    numbers, so it may differ by float32's noise floor (FLOOR_REL of its size) alone.
    A tensor whose float64 value is negligible beside both runs (zero in exact math,
    carried by float32 as rounding noise: no relative cut can judge it) passes within
    that noise and within assert_close's defaults.
    `labels`: the two phases as the messages name them (the deploy scenario's fresh
    compile against its warm run); the record's keys stay warm_* and cold_*."""
    now, then = labels
    mismatches: List[Dict[str, Any]] = []
    noise: List[Dict[str, Any]] = []
    incomparable: List[Dict[str, Any]] = []  # other shapes: the runs had other inputs
    for name in in_order(warm, cold):
        w, c = warm.get(name), cold.get(name)
        if w is None or c is None:
            mismatches.append({"name": name, "message": f"present in only one of {then}/{now}"})
            continue
        if w.shape != c.shape or (incomparable and not same_bits(w, c)):
            incomparable.append({"name": name, "message": (
                f"{then} {str(c.dtype).replace('torch.', '')}{list(c.shape)} vs {now} "
                f"{str(w.dtype).replace('torch.', '')}{list(w.shape)}"
                if w.shape != c.shape else f"computed after {incomparable[0]['name']}")})
            continue
        found = _warm_differs(name, w, c, tolerance, (ref or {}).get(name), name in random,
                              labels)
        if found is not None:
            (noise if found.pop("_within_noise", False) else mismatches).append(found)
    mode = "bitwise" if tolerance is None else f"atol={tolerance[0]},rtol={tolerance[1]}"
    if tolerance is None and ref is not None:
        mode += ", else float64 reference"
    return {"ok": not mismatches, "compared": len(cold) - len(incomparable), "mode": mode,
            "mismatches": mismatches, "within_noise": noise, "incomparable": incomparable}


def _warm_differs(name: str, w: Any, c: Any, tolerance: Optional[Tuple[float, float]],
                  r: Any, random: bool, labels: Tuple[str, str] = ("warm", "cold")
                  ) -> Optional[Dict[str, Any]]:
    """One tensor warm vs cold: None when equal; else what differs, marked
    `_within_noise` when it is within the noise both runs carry."""
    import torch

    now, then = labels
    if w.dtype != c.dtype or w.shape != c.shape:
        return {"name": name, "message":
                f"{then} {c.dtype}{list(c.shape)} vs {now} {w.dtype}{list(w.shape)}"}
    if tolerance is None:  # their bytes
        same = same_bits(w, c)
    else:
        w, c = on_compare_device(w, c)
        same = (bool(torch.allclose(w.double(), c.double(), atol=tolerance[0],
                                    rtol=tolerance[1], equal_nan=True))
                if w.is_floating_point() or w.is_complex() else bool(torch.equal(w, c)))
    if same:
        return None
    w, c, r = on_compare_device(w, c, r)
    diff = None
    if w.is_floating_point():
        diff = float((w.double() - c.double()).abs().nan_to_num(0).max()) if w.numel() else 0.0
    if tolerance is None and random and w.is_floating_point():
        d, size = rms((w.double() - c.double()).nan_to_num(0)), rms(c.double().nan_to_num(0))
        v = {"name": name, "max_abs_diff": diff, "diff_rmse": _round(d),
             "limit": _round(FLOOR_REL * size), "random": True}
        if d <= FLOOR_REL * size:
            return {**v, "_within_noise": True}
        return {**v, "message": (
            f"differs (max abs diff {diff:.3g}, RMSE {d:.3g}), beyond float32's noise floor "
            f"({FLOOR_REL:.2%} of its RMS, {FLOOR_REL * size:.3g}); it changes with the random "
            f"seed, so the same seed and compiled graph must draw the same numbers")}
    if tolerance is None and r is not None and w.is_floating_point() and r.shape == w.shape:
        v = {"name": name, "max_abs_diff": diff, **within_noise(w, c, r)}
        if v["ok"] and v["usable"]:
            return {**v, "_within_noise": True}
        close = assert_close_message(w, c, {})
        if v["ok"] and v["negligible"] and close is None:
            # zero in exact math (an attention key bias's gradient): both runs are rounding
            # noise around a float64 value negligible beside them, which no relative cut
            # can judge; within that noise and assert_close's defaults
            return {**v, "no_reference": True, "_within_noise": True}
        why = (f"beyond the noise both carry against a float64 run ({now} "
               f"{v['warm_rmse']:.3g}, {then} {v['cold_rmse']:.3g}; allowed {v['limit']:.3g})"
               if v["usable"] else "its float64 run is no reference (both miss it by "
               f"over {USABLE_REL:.0%} of its RMS)" + (
                   f"; assert_close: {close.splitlines()[0]}" if close else ""))
        return {"name": name, "max_abs_diff": diff, "float64": v, "message":
                f"differs (max abs diff {diff:.3g}, RMSE {v['diff_rmse']:.3g}), {why}"}
    return {"name": name, "max_abs_diff": diff,
            "message": "differs" + (f" (max abs diff {diff:.3g})" if diff is not None else "")}
