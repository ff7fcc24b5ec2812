"""Every bypass reason torch 2.5-2.13 gives has a fix hint (reasons as torch words them)."""
import pytest

from pytest_compilecache.layers.bypass import fix_for as _fix_for
from pytest_compilecache.layers.keys import normalize_reason


def fix_for(reason):
    """As the verdict asks: on the reason as torch's record gives it, normalized."""
    return _fix_for(normalize_reason(reason))

REASONS = [
    "Unsupported post grad custom pass", "Unsupported pre grad custom pass",
    "Unsupported joint custom pass", "Unsupported _pre_fusion_custom_pass",
    "Cannot cache a graph with freezing enabled", "Skipping graph with frozen constants",
    "FX graph cache is not enabled", "Can't cache torchbind objects",
    "Unsupported call_function target <class 'm.MyFn'>. \n Function module: m, \n"
    "Function name: apply",
    "Unsupported call_function target <function f at 0x…>. \n Function module: m, \n"
    "Function name: f",
    "Unsupported call_method target x. \nMethod module: m, \nMethod name: y",
    "Cannot produce stable cache key for unpicklable type Foo", "Failed to pickle cache key",
    "mkldnn tensors unpickleable", "SAC context_fn does not have a cache_hash attribute. ",
    "CustomKnapsackSolver.uuid() returned None, bypassing cache",
    "activation_memory_budget_solver is a raw callable without uuid() method, ",
    "Runtime constant folding can introduce constants that aren't static across runs",
    "compiler bisector enabled", "No shape env",
    "Won't cache a graph with fakify_first_call enabled",
    "AOTAutogradCache requires triton 3.2.0", "Reduce unsupported",
    "Unsupported call_function target <function _enter_autocast at 0x…>. \n Function module: "
    "torch.amp.autocast_mode, \nFunction name: _enter_autocast",
    # a tensor-parallel MLP on torch 2.11 (CUDA): DTensor's prim, not the user's code
    "Unsupported call_function target <function TorchInGraphFunctionVariable._get_handlers."
    "<locals>.handle_from_local.<locals>.fn_with_prim_types at 0x…>. Function module: "
    "torch._dynamo.variables.torch, Function name: prim from_local",
]


@pytest.mark.parametrize("reason", REASONS)
def test_every_bypass_reason_has_a_fix(reason: str) -> None:
    assert fix_for(reason), reason


def test_the_hints_name_the_right_fix() -> None:
    assert "CustomGraphPass" in fix_for("Unsupported post grad custom pass")
    assert "autograd_cache_allow_custom_autograd_functions" in fix_for(REASONS[8])
    assert "custom_op" in fix_for(REASONS[9])
    assert "outside the compiled function" in fix_for(REASONS[-2])
    assert "not the test's code" in fix_for(REASONS[-1])
    assert fix_for("something torch adds later") is None
