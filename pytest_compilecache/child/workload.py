"""The compiled workload of a check and its eager reference runs; the comparisons
of their outputs are in `compare`.

Runs in the child (imports torch lazily); no pytest import.
"""
from __future__ import annotations

import contextlib
import sys
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Tuple

from pytest_compilecache import terms
from pytest_compilecache.case import ModelCase
from pytest_compilecache.child.compare import Outputs


def resolve_device(requested: str) -> str:
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--compile-cache-device=cuda but torch.cuda.is_available() is "
                           "False in the check process; use --compile-cache-device=cpu or auto")
    return requested


def versions() -> Dict[str, Optional[str]]:
    import platform
    import sys

    import torch

    try:
        import triton  # type: ignore[import-not-found]

        triton_v: Optional[str] = triton.__version__
    except Exception:
        triton_v = None
    return {"torch": torch.__version__, "triton": triton_v, "python": platform.python_version(),
            "cuda": getattr(torch.version, "cuda", None), "executable": sys.executable}


def environment_of_python(device: str, python: str = sys.executable) -> Dict[str, Any]:
    """`environment(device)` of an interpreter, found in a subprocess (it imports torch,
    which a caller like the controller or the Action's detect step must not).
    subprocess.CalledProcessError (with its stderr) when that Python cannot."""
    import json
    import subprocess

    code = ("import json, sys; from pytest_compilecache.child.workload import environment; "
            "print(json.dumps(environment(sys.argv[1])))")
    out = subprocess.run([python, "-c", code, device], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def environment(requested_device: str) -> Dict[str, Any]:
    """The manifest environment of this interpreter, as a check child records it."""
    import torch

    device = resolve_device(requested_device)
    name = torch.cuda.get_device_name() if device == "cuda" else None
    return terms.environment(versions(), device, name)


def flatten(prefix: str, value: Any, out: Outputs) -> None:
    """Detached CPU copies of every tensor in `value`, taken at once (CUDA-graph
    outputs are overwritten by the next replay)."""
    import torch
    from torch.utils._pytree import keystr, tree_flatten_with_path  # type: ignore[attr-defined]

    try:
        leaves, _ = tree_flatten_with_path(value)
        named = [(keystr(p), leaf) for p, leaf in leaves]
    except Exception:
        named = [("", value)]
    for path, leaf in named:
        if isinstance(leaf, torch.Tensor):
            keep(prefix + path, leaf, out)
        elif isinstance(leaf, (bool, int, float)):
            out[prefix + path] = torch.tensor(leaf)
        elif isinstance(leaf, Mapping):  # e.g. a ModelOutput not registered as a pytree
            for k, v in leaf.items():
                flatten(f"{prefix}{path}[{k!r}]", v, out)
        elif isinstance(leaf, (list, tuple)) and leaf is not value:
            for i, v in enumerate(leaf):
                flatten(f"{prefix}{path}[{i}]", v, out)


# elements: a sparse tensor larger than this dense is kept as its coalesced indices and
# values (an Embedding(200000, 256, sparse=True) gradient: 205 MB dense a copy)
DENSE_LIMIT = 1 << 22


def keep(name: str, t: Any, out: Outputs) -> None:
    """A detached CPU copy of `t` under `name`, in the strided form every comparison
    reads: a sparse tensor (an `nn.Embedding(sparse=True)` gradient) as its dense values,
    a nested tensor as its components `name[i]`; the values are what is compared."""
    import torch

    t = t.detach()
    if t.is_nested:
        for i, part in enumerate(t.unbind()):
            keep(f"{name}[{i}]", part, out)
        return
    copy = t.to("cpu", copy=True)
    if copy.layout == torch.strided:
        out[name] = copy
    elif copy.numel() <= DENSE_LIMIT or copy.layout == getattr(torch, "_mkldnn", None):
        out[name] = copy.to_dense()
    else:  # a large table's few rows: what it holds, not gigabytes of zeros a run
        coo = copy.to_sparse().coalesce()
        out[f"{name}.indices"], out[f"{name}.values"] = coo.indices(), coo.values()


class Recorder:
    """Collects outputs of every compiled callable (test-body form; `calls` sees each
    call) and values that the test records itself; names are positional so cold, warm and eager line up.

    Only the outermost compiled call counts: run eagerly, a compiled function may call
    others that torch compiles for itself (flex_attention compiles its own wrapper when
    called outside torch.compile), which the compiled run never calls. `calls`: what
    happens at each outermost call's entry and exit (`replay.Observe` in the compiled
    run, which changes nothing; `replay.Replay` in the plugin's own re-runs)."""

    def __init__(self) -> None:
        self.outputs: Outputs = {}
        self._entered = 0   # outermost calls entered: the names' and the trail's index
        self.active = False
        self.depth = 0
        self.calls: Any = None
        self.steps = 0      # optimizer steps taken (counted only where `amplify` asks)
        self.later: set = set()  # names recorded after a second call or an optimizer step

    @property
    def entered(self) -> int:
        """Outermost compiled calls entered since the last reset."""
        return self._entered

    def reset(self) -> None:
        self.outputs = {}
        self._entered = 0
        self.depth = 0
        self.steps = 0
        self.later = set()

    def _flatten(self, prefix: str, value: Any) -> None:
        new: Outputs = {}
        flatten(prefix, value, new)
        self.outputs.update(new)
        if self._entered >= 2 or self.steps:
            self.later.update(new)

    def enter(self, args: Any = ()) -> None:
        """A compiled call begins, with `args` (read for their shapes, never changed)."""
        self.depth += 1
        if self.active and self.depth == 1:
            if self.calls is not None:
                self.calls.enter(self._entered, args)
            self._entered += 1

    def leave(self, label: str, value: Any, record: bool = True) -> Any:
        """A compiled call returned `value` (or raised: `record=False`): recorded if it
        was the outermost one, as call N for the N-th outermost call entered, so that a
        call that raised leaves the same gap in every run; the value the caller gets back
        (a re-run may replace it: `replay.Replay.perturb`)."""
        self.depth = max(0, self.depth - 1)
        if self.depth or not self.active:
            return value
        k = self._entered - 1
        if record:
            self._flatten(f"call{k}:{label}", value)
        if self.calls is not None:
            value = self.calls.leave(k, value)
        return value

    def record(self, name: str, value: Any) -> None:
        if self.active:
            self._flatten(f"record:{name}", value)


@contextlib.contextmanager
def force_eager() -> Iterator[Optional[str]]:
    """Run torch.compile'd code eagerly; yields None, or why that is impossible."""
    import torch

    set_stance = getattr(getattr(torch, "compiler", None), "set_stance", None)
    if set_stance is None:
        yield f"torch {torch.__version__} has no torch.compiler.set_stance (2.6+)"
        return
    with set_stance("force_eager"):
        yield None


def _to(value: Any, device: str) -> Any:
    import torch
    from torch.utils._pytree import tree_map

    return tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, value)


def prepare_case(case: ModelCase, device: str) -> Tuple[Any, Tuple[Any, ...], Dict[str, Any]]:
    model = case.model.to(device)
    model.train(case.train)
    return model, tuple(_to(list(case.example_inputs), device)), _to(dict(case.example_kwargs),
                                                                      device)


def run_case_step(fn: Callable[..., Any], model: Any, case: ModelCase, inputs: Tuple[Any, ...],
                  kwargs: Dict[str, Any], prefix: str) -> Outputs:
    """One forward (and backward when training) of `fn`; returns outputs and grads."""
    import torch

    out: Outputs = {}
    for p in model.parameters():
        p.grad = None
    ctx = torch.no_grad() if case.no_grad else contextlib.nullcontext()
    with ctx:
        result = fn(*inputs, **kwargs)
    flatten(prefix + "output", result, out)
    if case.train:
        loss = case.loss_fn(result) if case.loss_fn is not None else projection_loss(result)
        loss.backward()
        for name, p in model.named_parameters():
            if p.grad is not None:
                keep(f"{prefix}grad.{name}", p.grad, out)
    _sync(model)
    return out


def projection_loss(result: Any) -> Any:
    """Default training loss: outputs dotted with fixed-seed random weights. A plain sum
    is degenerate: the sum of a batch-normalised activation does not depend on its
    input, so every gradient before the last BatchNorm would be rounding noise."""
    import torch
    from torch.utils._pytree import tree_leaves

    gen = torch.Generator().manual_seed(0)
    parts = [(t.to(torch.promote_types(t.dtype, torch.float32))
              * torch.randn(t.shape, generator=gen).to(t.device)).sum()
             for t in tree_leaves(result) if isinstance(t, torch.Tensor) and t.requires_grad]
    if not parts:
        raise RuntimeError("ModelCase(train=True): the model returned no tensor that "
                           "requires grad; pass loss_fn= to say what to backpropagate")
    return torch.stack(parts).sum()


def _sync(model: Any) -> None:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def snapshot_state(model: Any) -> Dict[str, Any]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def save_outputs(outputs: Outputs, path: str) -> None:
    import torch

    torch.save(outputs, path)


def load_outputs(path: str) -> Outputs:
    """Our own cold phase wrote this into the check's private root; weights_only still."""
    import torch

    return torch.load(path, weights_only=True)


class CheckContext:
    """What the `compile_cache` fixture gives a test: the device a check compiles for,
    the phase (None outside a check) and `record()` for extra values to compare."""

    def __init__(self, device: Optional[str] = None, phase: Optional[str] = None,
                 recorder: Optional[Recorder] = None) -> None:
        self._device = device
        self.phase = phase
        self._recorder = recorder

    @property
    def device(self) -> str:
        if self._device is None:
            self._device = resolve_device("auto")
        return self._device

    def record(self, name: str, value: Any) -> None:
        """Compare `value` (tensors, nested) between cold, warm and eager runs."""
        if self._recorder is not None:
            self._recorder.record(name, value)
