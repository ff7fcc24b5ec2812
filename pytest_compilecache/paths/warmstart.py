"""The child's side of a warm-start path (--compile-cache-via): what the cold process
saves after its workload, what the warm process loads before it, and how a path
compiles the model. One handler per path, in a registry keyed by the path's name; the
child calls the same four methods whatever the path.

pytest-free; torch is imported inside the methods (the child has it loaded by then).
Every method records into `info`, the phase's "artifact" record: an `error` there is the
path's failure (the artifact is missing or unreadable), never the model's.
"""
from __future__ import annotations

import contextlib
import logging
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Type

Info = Dict[str, Any]

# torch's own words when caching precompile drops a guard, bypasses a frame, or cannot
# load an entry (torch/_dynamo/guards.py, output_graph.py, eval_frame.py)
_PRECOMPILE_WORDS = ("caching_precompile", "package bypass", "dynamo cache",
                     "cannot be saved into torch.compile() package")


class WarmStart:
    """The local restart: the cache directories themselves are the artifact."""
    name = "local"

    def not_applicable(self, form: str, case: Any) -> Optional[str]:
        """Why this path cannot check this workload on this torch, or None."""
        return None

    def before(self, phase: str, path: Path, info: Info) -> None:
        """Before the workload: the warm process loads the artifact."""

    def compile(self, phase: str, path: Path, compile_fn: Callable[..., Any], model: Any,
                case: Any, kwargs: Dict[str, Any], inputs: Any, ckw: Dict[str, Any],
                info: Info) -> Callable[..., Any]:
        """The callable a ModelCase's workload runs."""
        return compile_fn(model, **{**case.compile_kwargs, **kwargs})

    def after(self, phase: str, path: Path, info: Info) -> None:
        """After the workload: the cold process saves the artifact."""

    @contextlib.contextmanager
    def watching(self, info: Info, device: str) -> Iterator[None]:
        """Around the workload and the save: what torch says about this path."""
        yield


class MegaCache(WarmStart):
    """torch.compiler.save_cache_artifacts() bytes, loaded with load_cache_artifacts()."""
    name = "mega"
    since = "2.7"

    def not_applicable(self, form: str, case: Any) -> Optional[str]:
        import torch

        if getattr(torch.compiler, "save_cache_artifacts", None) is None:
            return f"torch {torch.__version__} has no torch.compiler.save_cache_artifacts " \
                   f"(torch {self.since}+)"
        return None

    def after(self, phase: str, path: Path, info: Info) -> None:
        if phase != "cold":
            return
        import torch

        try:
            saved = torch.compiler.save_cache_artifacts()
        except Exception:
            info["error"] = ("torch.compiler.save_cache_artifacts() failed:\n"
                             + traceback.format_exc(limit=4))
            return
        if saved is None:
            info["error"] = ("torch.compiler.save_cache_artifacts() returned nothing: no "
                             "cache artifact was recorded")
            return
        data, cache_info = saved
        path.write_bytes(data)
        info.update(bytes=len(data), counts=_artifact_counts(cache_info))

    def before(self, phase: str, path: Path, info: Info) -> None:
        if phase != "warm":
            return
        import torch

        if not path.exists():
            info["error"] = "the cold process saved no artifact"
            return
        t0 = time.perf_counter()
        try:
            loaded = torch.compiler.load_cache_artifacts(path.read_bytes())
        except Exception:
            info["error"] = ("torch.compiler.load_cache_artifacts failed on the cold "
                             "process's artifact:\n" + traceback.format_exc(limit=4))
            return
        info["load_s"] = round(time.perf_counter() - t0, 3)
        if loaded is None:  # torch only logs "Failed to un-pickle cache artifacts"
            info["error"] = ("torch.compiler.load_cache_artifacts() returned None: it could "
                             "not read the cold process's artifact (damaged or truncated?), "
                             "and loaded nothing")
        else:
            info["counts"] = _artifact_counts(loaded)


class CachingPrecompile(MegaCache):
    """Caching precompile (TORCH_CACHING_PRECOMPILE=1, set by the controller in both
    phases): the mega-cache then also carries Dynamo's compiled frames, so the warm
    process skips tracing. torch says why it drops a guard or bypasses a frame only in
    warnings, so they are kept."""
    name = "precompile"
    since = "2.9"

    def not_applicable(self, form: str, case: Any) -> Optional[str]:
        import torch

        if not hasattr(torch._dynamo.config, "caching_precompile"):
            return f"torch {torch.__version__} has no caching precompile (torch {self.since}+)"
        return super().not_applicable(form, case)

    @contextlib.contextmanager
    def watching(self, info: Info, device: str) -> Iterator[None]:
        said: List[str] = info.setdefault("torch_said", [])
        handler = _Collect(said)
        logger = logging.getLogger("torch._dynamo")
        logger.addHandler(handler)
        try:
            yield
        finally:
            logger.removeHandler(handler)


class RemoteCaches(WarmStart):
    """torch's Redis remote caches (the controller sets the env: FX graph, AOTAutograd,
    autotune, PGO, and the server's address). What this process got from and put into
    each remote cache, from torch._inductor.remote_cache.cache_stats (2.6+)."""
    name = "remote"

    def not_applicable(self, form: str, case: Any) -> Optional[str]:
        import torch

        try:
            from torch._inductor.remote_cache import cache_stats  # noqa: F401
        except ImportError:
            return f"torch {torch.__version__} keeps no remote cache statistics (2.6+)"
        return None

    @contextlib.contextmanager
    def watching(self, info: Info, device: str) -> Iterator[None]:
        """The autotune remote caches only on CUDA: they key on the Triton backend, and
        on CPU torch 2.13 fails an assert building that key (autotune_cache.py)."""
        import torch

        with torch._inductor.config.patch(autotune_remote_cache=device == "cuda",
                                          bundled_autotune_remote_cache=device == "cuda"):
            yield

    def after(self, phase: str, path: Path, info: Info) -> None:
        from torch._inductor.remote_cache import cache_stats

        info["remote"] = {name: {"hit": s.hit, "miss": s.miss, "put": s.put,
                                 "exception": s.exception}
                          for name, s in sorted(cache_stats._stats.items())}


class _AOTBase(WarmStart):
    """Paths whose artifact replaces torch.compile in the warm process: only a
    ModelCase says what the model and its inputs are."""

    def not_applicable(self, form: str, case: Any) -> Optional[str]:
        if form != "model_case":
            return (f"needs a ModelCase fixture (a test body has no single model and inputs "
                    f"to {self.name}-compile)")
        return None


class AOTCompiledFunction(_AOTBase):
    """torch.compile(fn, fullgraph=True).aot_compile(...), save_compiled_function(path),
    torch.compiler.load_compiled_function(file) in the warm process."""
    name = "aot"

    def not_applicable(self, form: str, case: Any) -> Optional[str]:
        import torch

        if getattr(torch.compiler, "load_compiled_function", None) is None or \
                not hasattr(torch.compile(call_model, fullgraph=True), "aot_compile"):
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
                                     f"{_one_line(e)}") from e
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
                                    f"compile this model: {_one_line(e)}") from e
        fn.save_compiled_function(str(path))
        info["bytes"] = path.stat().st_size
        return lambda *a, **k: fn(model, *a, **k)


class AOTInductorPackage(_AOTBase):
    """torch.export, aoti_compile_and_package to a .pt2 file, aoti_load_package in the
    warm process: inference only."""
    name = "aoti"

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
                                        f"{_one_line(e)}") from e
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
                                 f"{_one_line(e)}") from e
        info["load_s"] = round(time.perf_counter() - t0, 3)
        return loaded


class ArtifactFailed(Exception):
    """The warm process has nothing it can load: the path failed, not the model."""


class NotApplicable(Exception):
    """The workload cannot take this path (aot without a full graph, a model torch.export
    cannot trace): the check says `n/a` with the reason, never pass."""


def call_model(model: Any, *args: Any, **kwargs: Any) -> Any:
    """What `aot` compiles: a module-level function, importable in the warm process."""
    return model(*args, **kwargs)


class _Collect(logging.Handler):
    def __init__(self, into: List[str]) -> None:
        super().__init__(logging.WARNING)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:
            return
        if any(w in text for w in _PRECOMPILE_WORDS) and text not in self.into:
            self.into.append(text[:500])


def _one_line(e: BaseException) -> str:
    """The exception's message on one line (torch's run over several)."""
    text = " ".join(x.strip() for x in str(e).splitlines() if x.strip())
    return f"{type(e).__name__}: {text}"[:700]


def _artifact_counts(cache_info: Any) -> Dict[str, int]:
    """Artifacts per kind in a torch CacheInfo (e.g. inductor_artifacts: 3)."""
    artifacts = getattr(cache_info, "artifacts", None) or {}
    return {str(k): len(v) for k, v in artifacts.items()}


REGISTRY: Dict[str, Type[WarmStart]] = {
    h.name: h for h in (WarmStart, MegaCache, CachingPrecompile, AOTCompiledFunction,
                        AOTInductorPackage, RemoteCaches)}
