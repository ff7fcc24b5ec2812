"""An AOT-compiled function (--compile-cache-via=aot): torch.compile(fullgraph=True)
.aot_compile, save_compiled_function in the cold process,
torch.compiler.load_compiled_function in the warm one. Only a ModelCase says what the
model and its inputs are."""
from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Callable, Dict, Optional

from pytest_compilecache.layers.base import Carrier
from pytest_compilecache.paths.artifact import LoadedArtifactPath
from pytest_compilecache.paths.base import ArtifactFailed, Info, NotApplicable, one_line


class AOTCompiled(LoadedArtifactPath):
    """torch.compile(fullgraph=True).aot_compile, save_compiled_function,
    torch.compiler.load_compiled_function."""
    name = via = "aot"
    summary = "aot (aot_compile + save_compiled_function, ModelCase, fullgraph)"
    loader = "load_compiled_function"
    carrier = Carrier("the saved compiled function",
                      "it holds Inductor's output code, whose C++ kernels are compiled on load")

    def not_applicable(self, form: str, case: Any) -> Optional[str]:
        import torch

        if (getattr(torch.compiler, "load_compiled_function", None) is None or
                not hasattr(torch.compile(call_model, fullgraph=True), "aot_compile")):
            return (f"torch {torch.__version__} has no torch.compile(...).aot_compile and "
                    f"torch.compiler.load_compiled_function")
        return super().not_applicable(form, case)

    def compile(self, phase: str, path: Path, compile_fn: Callable[..., Any], model: Any,
                case: Any, kwargs: Dict[str, Any], inputs: Any, ckw: Dict[str, Any],
                info: Info) -> Callable[..., Any]:
        import torch

        if phase == "warm":
            if not path.exists():
                raise ArtifactFailed("the cold process saved no compiled function")
            t0 = time.perf_counter()
            try:
                with open(path, "rb") as f:
                    loaded = torch.compiler.load_compiled_function(f)
            except Exception as e:
                raise ArtifactFailed(f"torch.compiler.load_compiled_function could not load "
                                     f"what the cold process saved (damaged or truncated?): "
                                     f"{one_line(e)}") from e
            info["load_s"] = round(time.perf_counter() - t0, 3)
            return lambda *a, **k: loaded(model, *a, **k)
        options = {**case.compile_kwargs, **kwargs, "fullgraph": True}
        # the model is an argument, not a closure: the artifact holds code, not weights
        # (save_compiled_function refuses a captured module)
        grad = torch.no_grad() if case.no_grad else contextlib.nullcontext()
        with grad:  # grad mode is a global guard of the compiled function
            try:
                fn = compile_fn(call_model, **options).aot_compile(((model, *inputs), ckw))
            except Exception as e:
                raise NotApplicable(f"torch.compile(fullgraph=True).aot_compile could not "
                                    f"compile this model: {one_line(e)}") from e
        fn.save_compiled_function(str(path))
        info["bytes"] = path.stat().st_size
        return lambda *a, **k: fn(model, *a, **k)

def call_model(model: Any, *args: Any, **kwargs: Any) -> Any:
    """What `aot` compiles: a module-level function, importable in the warm process."""
    return model(*args, **kwargs)
