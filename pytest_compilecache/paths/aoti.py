"""An AOTInductor package (--compile-cache-via=aoti): torch.export and
aoti_compile_and_package in the cold process, aoti_load_package in the warm one:
inference only."""
from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Callable, Dict, Optional

from pytest_compilecache.layers.base import Carrier
from pytest_compilecache.paths.artifact import LoadedArtifactPath
from pytest_compilecache.paths.base import ArtifactFailed, Info, NotApplicable, one_line


class AOTInductor(LoadedArtifactPath):
    """torch.export + aoti_compile_and_package, aoti_load_package."""
    name = via = "aoti"
    summary = "aoti (torch.export + AOTInductor package, ModelCase inference)"
    loader = "aoti_load_package"
    carrier = Carrier("the AOTInductor package")
    artifact_file = "artifact.pt2"  # aoti_compile_and_package wants the suffix

    def not_applicable(self, form: str, case: Any) -> Optional[str]:
        import torch

        if getattr(torch._inductor, "aoti_compile_and_package", None) is None:
            return (f"torch {torch.__version__} has no torch._inductor.aoti_compile_and_package "
                    f"(torch 2.6+)")
        if case is not None and case.train:
            return "AOTInductor packages run inference only; this ModelCase trains"
        return super().not_applicable(form, case)

    def compile(self, phase: str, path: Path, compile_fn: Callable[..., Any], model: Any,
                case: Any, kwargs: Dict[str, Any], inputs: Any, ckw: Dict[str, Any],
                info: Info) -> Callable[..., Any]:
        import torch

        if phase == "cold":
            # built here, loaded only in the warm process: loading it in the process that
            # built it crashed (SIGSEGV in _load_aoti, torch 2.11 CUDA, every model tried),
            # and a service loads it in a process of its own anyway. Cold runs eagerly.
            grad = torch.no_grad() if case.no_grad else contextlib.nullcontext()
            with grad:
                try:
                    program = torch.export.export(model, tuple(inputs), dict(ckw))
                except Exception as e:
                    raise NotApplicable(f"torch.export could not export this model: "
                                        f"{one_line(e)}") from e
                torch._inductor.aoti_compile_and_package(program, package_path=str(path))
            info["bytes"] = path.stat().st_size
            ignored = {**case.compile_kwargs, **kwargs}
            if ignored:
                info["ignored_options"] = sorted(ignored)
            info["cold_ran"] = "eager"
            return model
        if not path.exists():
            raise ArtifactFailed("the cold process wrote no AOTInductor package")
        t0 = time.perf_counter()
        try:
            loaded = torch._inductor.aoti_load_package(str(path))
        except Exception as e:
            raise ArtifactFailed(f"torch._inductor.aoti_load_package could not load the "
                                 f"package the cold process wrote (damaged or truncated?): "
                                 f"{one_line(e)}") from e
        info["load_s"] = round(time.perf_counter() - t0, 3)
        return loaded
