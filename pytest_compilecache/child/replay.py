"""The random state of a test body's compiled run, observed, and replayed in the
plugin's own runs of the body.

The compiled run is the user's program: nothing here seeds or rewinds a generator
during it. It only reads the states (torch's CPU and CUDA generators, Python's
`random`, numpy's global one) at each outermost compiled call's entry and exit. The
eager, float64 and probe re-runs then set those states at the same instants, so every
draw outside a compiled call (a fresh batch, a token sampled from the logits, sizes
drawn with `random.randrange`, a test that seeds itself between calls) is the draw the
compiled run made, whatever the compiled code consumed. Inside a call, the reference
starts from the compiled run's entry state, the probe from a seed of its own (which
tensors move with the seed: `randomness`).

Before the test, both phases seed the three generators once, as pytest-randomly does,
so that cold and warm draw alike; a test that seeds itself gets the draws it gets
without the plugin. Import-time draws stay per process (a constant drawn at import
drifts between restarts in production too).

That seeding would hide one thing a real restart does. torch's generators start from a
fixed seed in every process, but Python's `random` and numpy's global generator are
seeded from the OS: a value the model draws from them (a jittered temperature kept as
a float) is a graph constant that differs at every production restart, so every
restart misses the FX and AOTAutograd caches. The rule: the outputs are judged on
phases that draw alike (cold, warm), the keys also on a restart whose Python-side
draws differ. Where the phase saw the test draw from those two generators (`moved`),
a third phase (`reseeded`, paths/local.py) restarts over the warm root with torch's
seed unchanged and theirs another (`seed_all`'s `python_seed`), and compares no
outputs. Drawn test data (sizes under dynamic shapes) hits there as in a real
restart; a drawn constant misses with the graph code changed, and the check fails
(judge/reseeded.py). A test that seeds itself draws alike again and hits.

Runs in the child with torch alone; no pytest.
"""
from __future__ import annotations

import hashlib
import importlib.util
import random
import sys
from typing import Any, Callable, Dict, List, Optional

State = Dict[str, Any]
# the entries of the trail kept as digests in the phase record, to name where cold's
# and warm's draws parted (bounded: a sampling loop makes thousands of calls)
TRAIL_DIGESTS = 64


def _numpy() -> Any:
    """numpy's module where the process has it imported or can import it; else None
    (torch does not need numpy, and a blocked import is a None in sys.modules)."""
    if "numpy" in sys.modules:
        return sys.modules["numpy"]
    try:
        if importlib.util.find_spec("numpy") is None:
            return None
        import numpy  # type: ignore[import-not-found]
    except Exception:
        return None
    return numpy


# the generators a production process seeds from the OS (torch's start from a fixed seed)
PER_PROCESS = ("random", "numpy")


def seed_all(seed: int, python_seed: Optional[int] = None) -> None:
    """Before the test, in every phase: the three generators from one seed, or Python's
    and numpy's from `python_seed` (the reseeded restart: their draws differ, torch's
    do not)."""
    import torch

    torch.manual_seed(seed)
    other = seed if python_seed is None else python_seed
    random.seed(other)
    np = _numpy()
    if np is not None:
        np.random.seed(other)


def moved(since: State) -> List[str]:
    """The per-process generators (`PER_PROCESS`) whose state changed since `since`:
    the test drew from them."""
    now = capture()
    return [name for name in PER_PROCESS if name in since
            and digests({name: since[name]}) != digests({name: now.get(name)})]


def capture() -> State:
    """Every generator's state, read without changing it."""
    import torch

    state: State = {"torch": torch.get_rng_state(), "random": random.getstate()}
    if (torch.cuda.is_available() and torch.cuda.is_initialized()
            and not torch.cuda.is_current_stream_capturing()):  # a graph the test captures
        state["cuda"] = torch.cuda.get_rng_state_all()
    np = sys.modules.get("numpy")  # only where the program has imported it
    if np is not None:
        state["numpy"] = np.random.get_state()
    return state


def restore(state: State) -> None:
    import torch

    torch.set_rng_state(state["torch"])
    random.setstate(state["random"])
    if ("cuda" in state and torch.cuda.is_initialized()
            and not torch.cuda.is_current_stream_capturing()):
        torch.cuda.set_rng_state_all(state["cuda"])
    np = sys.modules.get("numpy")
    if "numpy" in state and np is not None:
        np.random.set_state(state["numpy"])


def digests(state: State) -> Dict[str, str]:
    """A short digest of each generator's state (the phase record's trail)."""
    from pytest_compilecache.child.bits import raw_bytes

    out: Dict[str, str] = {}
    for name, value in state.items():
        h = hashlib.sha256()
        if name == "torch":
            h.update(raw_bytes(value))
        elif name == "cuda":
            for t in value:
                h.update(raw_bytes(t))
        else:
            h.update(repr(value).encode())
        out[name] = h.hexdigest()[:12]
    return out


def shapes(args: Any) -> str:
    """A digest of the shapes and dtypes of a call's tensor arguments: where two runs'
    calls had other inputs, their outputs cannot be compared."""
    import torch
    from torch.utils._pytree import tree_leaves

    try:
        leaves = tree_leaves(args)
    except Exception:
        leaves = list(args) if isinstance(args, (list, tuple)) else [args]
    text = repr([(tuple(t.shape), str(t.dtype)) for t in leaves if isinstance(t, torch.Tensor)])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


class Observe:
    """The compiled run: reads each outermost call's entry and exit states, and its
    arguments' shapes (`inputs` in the digests)."""

    def __init__(self) -> None:
        self.trail: List[List[Optional[State]]] = []
        self.inputs: List[str] = []

    def enter(self, k: int, args: Any = ()) -> None:
        self.trail.append([capture(), None])
        self.inputs.append(shapes(args))

    def leave(self, k: int, value: Any) -> Any:
        if k < len(self.trail):
            self.trail[k][1] = capture()
        return value

    def digests(self) -> List[Dict[str, str]]:
        """Per call (the first TRAIL_DIGESTS): each generator's state and the inputs'
        shapes at its entry."""
        return [{**digests(entry), "inputs": shape}
                for (entry, _), shape in zip(self.trail[:TRAIL_DIGESTS], self.inputs) if entry]


class Replay:
    """A re-run of the body: at each outermost call's entry the compiled run's entry
    state (or, with `inside_seed`, torch's generators from that seed plus the call's
    index: the probe), at its exit the compiled run's exit state. `perturb` may
    replace a call's value as the body receives it (`amplify`)."""

    def __init__(self, trail: List[List[Optional[State]]], inside_seed: Optional[int] = None,
                 perturb: Optional[Callable[[int, Any], Any]] = None,
                 watch: Optional[List[str]] = None,
                 on_enter: Optional[Callable[[], None]] = None) -> None:
        self.trail = trail
        self.on_enter = on_enter  # told at each call's entry (`amp.Seen.sample`)
        self.inside_seed = inside_seed
        self.perturb = perturb
        self.watch = watch
        # with `watch` (the compiled run's `Observe.inputs`): the first call whose entry
        # found other states or input shapes than the compiled run had there (the body
        # drew differently before it: a clock-seeded generator), and what differed
        self.parted: Optional[Dict[str, Any]] = None

    def enter(self, k: int, args: Any = ()) -> None:
        if self.on_enter is not None:
            self.on_enter()
        if k >= len(self.trail) or self.trail[k][0] is None:
            return  # a call the compiled run did not make: said by the comparison
        if self.watch is not None and self.parted is None:
            now, then = digests(capture()), digests(self.trail[k][0])  # type: ignore[arg-type]
            if k < len(self.watch):
                now["inputs"], then["inputs"] = shapes(args), self.watch[k]
            names = sorted(n for n in set(now) | set(then) if now.get(n) != then.get(n))
            if names:
                self.parted = {"call": k, "generators": names}
        restore(self.trail[k][0])  # type: ignore[arg-type]
        if self.inside_seed is not None:
            import torch

            torch.manual_seed(self.inside_seed + k)

    def leave(self, k: int, value: Any) -> Any:
        if k < len(self.trail) and self.trail[k][1] is not None:
            restore(self.trail[k][1])  # type: ignore[arg-type]
        return self.perturb(k, value) if self.perturb is not None else value
