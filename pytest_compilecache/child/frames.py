"""What the phase child tells of a frame Dynamo met: the user's function behind a torch
wrapper frame, what a code's PGO closure hash depends on, who called
torch._dynamo.reset(). Read from live frames and closures, never changed. No pytest
import."""
from __future__ import annotations

import os
from typing import Any, List, Optional


def in_torch(filename: str) -> bool:
    return f"{os.sep}torch{os.sep}" in filename


def user_function(closure: Any) -> Optional[str]:
    """The user's function a torch wrapper frame (wrap_inline's `inner`) calls: the
    first function in its closure whose code is not torch's, as 'name (file:line)'."""
    for cell in closure:
        try:
            obj = cell.cell_contents
        except ValueError:
            continue
        code = getattr(getattr(obj, "__func__", obj), "__code__", None)
        if code is None and hasattr(type(obj), "forward"):  # a module: its forward
            code = getattr(type(obj).forward, "__code__", None)
        if code is not None and not in_torch(code.co_filename):
            return f"{code.co_name} ({os.path.basename(code.co_filename)}:{code.co_firstlineno})"
    return None


def closure_hash_inputs(closure: Any) -> List[str]:
    """What torch's PGO closure hash (`pgo.CodeId.make`: `hash()` of each cell's function
    code, None for any other value) depends on here, beyond the code itself:
    "address" where it hashes None on Python <= 3.11 (None's hash is its address there,
    which moves per process, PYTHONHASHSEED or not: a cell that holds no function, or a
    function whose constants hold None), "strings" where it hashes a code's names (str
    hashes, randomized per process unless PYTHONHASHSEED is fixed)."""
    import sys

    old = sys.version_info < (3, 12)
    out: List[str] = []
    for cell in closure:
        try:
            code = getattr(cell.cell_contents, "__code__", None)
        except ValueError:
            code = None
        if code is not None and "strings" not in out:
            out.append("strings")
        if old and (code is None or _holds_none(code.co_consts)) and "address" not in out:
            out.append("address")
    return sorted(out)


def _holds_none(consts: Any) -> bool:
    return any(c is None or (isinstance(c, tuple) and _holds_none(c))
               or (hasattr(c, "co_consts") and _holds_none(c.co_consts)) for c in consts)


def reset_caller(frame: Any) -> str:
    """Who called torch._dynamo.reset() from `frame` outward: "" for the test's code
    (directly, or through torch.compiler.reset()), else the torch function the test
    called that resets ("torch._dynamo.explain")."""
    import torch._dynamo

    outer = None
    while frame is not None and in_torch(frame.f_code.co_filename):
        outer, frame = frame, frame.f_back
    if outer is None or outer.f_code.co_name == "reset":
        return ""
    code = outer.f_code
    name = getattr(code, "co_qualname", code.co_name).split(".<locals>")[0]
    module = str(outer.f_globals.get("__name__", "torch"))
    if module.startswith("torch._dynamo") and hasattr(torch._dynamo, name):
        module = "torch._dynamo"
    return f"{module}.{name}"
