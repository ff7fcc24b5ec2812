"""ModelCase: what a model fixture hands to a compile-cache check.

Pure data; torch is not imported here, so building a ModelCase in a fixture
costs nothing in the pytest controller (fixtures only run in the child).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

from pytest_compilecache.terms import CHECK_KWARGS

MODES = ("inference", "forward", "train")


@dataclass
class ModelCase:
    """A model and how production runs it.

    * ``train=True``: a training step, forward + ``backward()`` of ``loss_fn(output)``
      (default: the sum of every floating output); gradients are compared too.
    * ``train=False`` (default): inference under ``torch.no_grad()`` in ``eval()`` mode.
    * ``train=False, no_grad=False``: a forward with grad mode left on, as serving code
      that forgets ``no_grad`` does (its AOTAutograd entry is never saved).
    """

    model: Any
    example_inputs: Sequence[Any] = ()
    train: bool = False
    no_grad: Optional[bool] = None
    example_kwargs: Mapping[str, Any] = field(default_factory=dict)
    loss_fn: Optional[Callable[[Any], Any]] = None
    compile_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.no_grad is None:
            self.no_grad = not self.train
        if self.train and self.no_grad:
            raise ValueError("ModelCase(train=True, no_grad=True) is contradictory: "
                             "a training step needs grad mode; drop no_grad")
        if not isinstance(self.example_inputs, (tuple, list)):
            self.example_inputs = (self.example_inputs,)

    @property
    def mode(self) -> str:
        """'train', 'inference' (no_grad) or 'forward' (grad mode on, no backward)."""
        if self.train:
            return "train"
        return "inference" if self.no_grad else "forward"


# torch.compile(model, *, fullgraph, dynamic, backend, mode, options, disable): the same
# keywords on torch 2.5 through 2.15, read here so that checking a marker imports no torch.
COMPILE_KWARGS = ("fullgraph", "dynamic", "backend", "mode", "options", "disable")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def marker_problem(args: Sequence[Any], kwargs: Mapping[str, Any]) -> Optional[str]:
    """What is wrong with `@pytest.mark.compile_cache(*args, **kwargs)`, or None: its
    arguments are torch.compile's keywords, passed to the compile of a ModelCase."""
    if args:
        return (f"positional argument(s) {', '.join(map(repr, args))}: pass torch.compile's "
                f"keywords by name, e.g. compile_cache(mode={args[0]!r})")
    for what in CHECK_KWARGS:
        n = kwargs.get(what, 1)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            return f"{what}={n!r}: the number of processes of the body, an integer from 1"
    fleets = [k for k in CHECK_KWARGS if k in kwargs]
    if len(fleets) > 1:
        return (f"{' and '.join(fleets)} together: a check runs as the ranks of one job "
                f"(ranks=N), as replicas of one single-process program (replicas=N), or "
                f"compiled once and loaded by N ranks (compile_once=N); give one")
    unknown = [k for k in kwargs if k not in COMPILE_KWARGS and k not in CHECK_KWARGS]
    if unknown:
        return (f"{', '.join(unknown)}: not a torch.compile keyword (it takes "
                f"{', '.join(COMPILE_KWARGS)})")
    mode = kwargs.get("mode")
    if mode is not None and mode not in COMPILE_MODES:
        return f"mode={mode!r}: torch.compile's modes are {', '.join(map(repr, COMPILE_MODES))}"
    if mode is not None and kwargs.get("options") is not None:
        return "mode and options together: torch.compile takes one or the other"
    return None
