"""The plugin-free truth about false hits in torch.compile's caches.

A false hit is a cache entry written by one program variant and loaded by another whose
cache key is blind to the difference, so the second variant gets the first one's compiled
code and wrong numbers. The plugin's verdicts need a reference that uses no plugin at all:
this script runs each variant of a scenario in a fresh Python process, in order, over ONE
shared TORCHINDUCTOR_CACHE_DIR (and TRITON_CACHE_DIR), and each variant again cold, in its
own empty cache dir. It prints, per variant, the FX graph cache and AOTAutograd cache hits
and misses of the shared run (torch._dynamo.utils.counters), the largest absolute
difference of the shared run's forward output and parameter gradients from the cold run's,
and a verdict: FALSE HIT when the shared run hit and its numbers differ.

    python benchmarks/false_hits/plain_variants.py [SCENARIO ...] [--atol 1e-6] [--keep DIR]
        [--fault quota|removed]

--fault quota: the shared dir's fxgraph and aotautograd refuse the first variant's writes
(files where torch makes its dirs), given back before the second; --fault removed: the
shared dir removed between the variants. What the plugin's shared turn must not pass.

No SCENARIO, or `all`, runs every scenario. Scenarios (two variants each, tiny CPU models):

  custom_pass               post_grad_custom_post_pass scales relu's output by the setting
                            (2, then 3); its uuid() hashes the source file, not the setting
  custom_pass_keyed         the same pass, uuid() includes the setting
  shared_graph              a Python-side name that no graph reads ("a", then "b"): one
                            entry, legitimately shared
  checkpoint_allow_in_graph an allow_in_graph callable inside torch.utils.checkpoint whose
                            body reads a module-level setting (pytorch PR #194658: the AOT
                            key names the callable by its import path only)
  custom_op_backward        a torch.library.custom_op scaling by the setting, forward and
                            register_autograd backward: the forward body runs at call time,
                            the backward is traced into the entry (pytorch issue #144344)
  custom_op_fake            a custom op whose register_fake output shape depends on the
                            setting (the stale entry's size assert fails: an error, loud)
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, Tuple

import torch

VARIANTS: Dict[str, Tuple[str, ...]] = {
    "custom_pass": ("2", "3"),
    "custom_pass_keyed": ("2", "3"),
    "shared_graph": ("a", "b"),
    "checkpoint_allow_in_graph": ("2", "3"),
    "custom_op_backward": ("2", "3"),
    "custom_op_fake": ("2", "3"),
}

# --- the models (built in the child only) -------------------------------------------------

_SCALE = [1.0]  # read by _opaque at trace time; set by the checkpoint_allow_in_graph variant


@torch._dynamo.allow_in_graph
def _opaque(x: torch.Tensor) -> torch.Tensor:
    # Dynamo does not trace into an allow_in_graph callable: its graph calls `_opaque` by
    # name and AOTAutograd bakes `* _SCALE[0]` into the compiled code.
    return x * _SCALE[0]


class _Mlp(torch.nn.Module):
    def __init__(self, mid: Callable[[torch.Tensor], torch.Tensor], name: str = "") -> None:
        super().__init__()
        self.name = name  # Python-side only: no graph reads it
        self.lin1 = torch.nn.Linear(8, 8)
        self.lin2 = torch.nn.Linear(8, 4)
        self.mid = mid

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin2(self.mid(self.lin1(x)))


def _scale_relu_pass(scale: float, keyed: bool) -> Any:
    from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

    class ScaleRelu(CustomGraphPass):
        """Multiplies every aten.relu output by `scale` (a post-grad pass)."""

        def __call__(self, graph: torch.fx.graph.Graph) -> None:
            for node in list(graph.nodes):
                if node.op == "call_function" and node.target is torch.ops.aten.relu.default:
                    with graph.inserting_after(node):
                        mul = graph.call_function(torch.ops.aten.mul.Tensor, (node, scale))
                    node.replace_all_uses_with(mul, delete_user_cb=lambda user: user is not mul)

        def uuid(self) -> Any:
            source = get_hash_for_files((__file__,))  # what CustomPassBase's docstring advises
            return (source, scale) if keyed else source

    return ScaleRelu()


def _custom_op(k: int, fake_shape: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    if fake_shape:  # output (n, d * k): the shape is the setting's
        @torch.library.custom_op("fh::widen", mutates_args=())
        def widen(x: torch.Tensor) -> torch.Tensor:
            return x.repeat(1, k)

        @widen.register_fake
        def _(x: torch.Tensor) -> torch.Tensor:
            return x.new_empty(x.shape[0], x.shape[1] * k)

        widen.register_autograd(lambda ctx, g: g.reshape(g.shape[0], k, -1).sum(1))

        def ends(x: torch.Tensor) -> torch.Tensor:
            w = widen(x)
            return w[:, :8] + w[:, -8:]

        return ends

    @torch.library.custom_op("fh::scaled", mutates_args=())
    def scaled(x: torch.Tensor) -> torch.Tensor:
        return x * k

    @scaled.register_fake
    def _(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    scaled.register_autograd(lambda ctx, g: g * k)
    return lambda x: scaled(x)


def build(scenario: str, setting: str) -> torch.nn.Module:
    if scenario in ("custom_pass", "custom_pass_keyed"):
        torch._inductor.config.post_grad_custom_post_pass = _scale_relu_pass(
            float(setting), keyed=scenario == "custom_pass_keyed")
        return _Mlp(torch.relu)
    if scenario == "shared_graph":
        return _Mlp(torch.relu, name=setting)
    if scenario == "checkpoint_allow_in_graph":
        _SCALE[0] = float(setting)
        return _Mlp(lambda h: torch.utils.checkpoint.checkpoint(
            lambda y: _opaque(y).relu(), h, use_reentrant=False))
    if scenario in ("custom_op_backward", "custom_op_fake"):
        return _Mlp(_custom_op(int(setting), fake_shape=scenario == "custom_op_fake"))
    raise SystemExit(f"unknown scenario {scenario!r}; known: {', '.join(VARIANTS)}")


def child(scenario: str, setting: str, out: Path) -> None:
    """One fresh process: compile, forward, backward; write counters and numbers."""
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    model = build(scenario, setting)
    x = torch.randn(4, 8)
    error = None
    try:
        y = torch.compile(model)(x)
        y.sum().backward()
        torch.save({"out": y.detach(), **{f"grad {n}": p.grad for n, p in model.named_parameters()}},
                   out / "numbers.pt")
    except Exception as e:  # a stale entry may fail loudly: report it as such
        error = f"{type(e).__name__}: {str(e).splitlines()[0][:100]}"
    result = {
        "fx": [counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"]],
        "aot": [counters["aot_autograd"]["autograd_cache_hit"],
                counters["aot_autograd"]["autograd_cache_miss"],
                counters["aot_autograd"]["autograd_cache_bypass"]],
        "error": error,
    }
    (out / "result.json").write_text(json.dumps(result))


# --- the parent ---------------------------------------------------------------------------

def run_child(scenario: str, setting: str, cache: Path, out: Path) -> Dict[str, Any]:
    out.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR_", "TRITON_"))}
    env.update(TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"), TRITON_CACHE_DIR=str(cache / "triton"),
               TORCHINDUCTOR_FX_GRAPH_CACHE="1", TORCHINDUCTOR_AUTOGRAD_CACHE="1")
    proc = subprocess.run([sys.executable, __file__, "--child", scenario, setting, str(out)],
                          env=env, capture_output=True, text=True)
    if not (out / "result.json").exists():
        sys.exit(f"{scenario} {setting}: child failed (rc {proc.returncode})\n{proc.stderr[-3000:]}")
    result = json.loads((out / "result.json").read_text())
    numbers = out / "numbers.pt"
    result["numbers"] = torch.load(numbers) if numbers.exists() else None
    return result


def max_diffs(shared: Dict[str, torch.Tensor], cold: Dict[str, torch.Tensor]) -> Tuple[float, float]:
    def diff(a: torch.Tensor, b: torch.Tensor) -> float:
        return float("inf") if a.shape != b.shape else (a - b).abs().max().item()

    grads = [diff(shared[k], cold[k]) for k in cold if k.startswith("grad ")]
    return diff(shared["out"], cold["out"]), max(grads)


def verdict(shared: Dict[str, Any], cold: Dict[str, Any], d_out: float, d_grad: float,
            atol: float) -> str:
    hit = shared["fx"][0] > 0 or shared["aot"][0] > 0
    if shared["error"] or cold["error"]:
        which = "shared" if shared["error"] else "cold"
        return f"error in {which} run{' after a hit' if hit else ''}: {shared['error'] or cold['error']}"
    differs = max(d_out, d_grad) > atol
    if hit:
        return "FALSE HIT" if differs else "hit, equal"
    return "miss, DIFFERS (nondeterminism?)" if differs else "miss, equal"


def _fault(fault: str, i: int, shared_cache: Path) -> None:
    """Before variant `i`'s shared run: the fault the shared dir takes (none by default)."""
    inductor = shared_cache / "inductor"
    if fault == "quota" and i == 0:
        inductor.mkdir(parents=True)
        for name in ("fxgraph", "aotautograd"):
            (inductor / name).touch()
    elif fault == "quota" and i == 1:
        for name in ("fxgraph", "aotautograd"):
            (inductor / name).unlink()
    elif fault == "removed" and i == 1:
        shutil.rmtree(shared_cache)


def run_scenario(scenario: str, root: Path, atol: float, fault: str = "none") -> None:
    shared_cache = root / scenario / "shared-cache"
    print(f"\n## {scenario} (torch {torch.__version__}; fault: {fault})\n")
    print("| variant | fx hit/miss | aot hit/miss | cold fx/aot miss | max abs d out | "
          "max abs d grad | verdict | s |")
    print("|---|---|---|---|---|---|---|---|")
    for i, setting in enumerate(VARIANTS[scenario]):
        start = time.monotonic()
        _fault(fault, i, shared_cache)
        shared = run_child(scenario, setting, shared_cache, root / scenario / setting / "shared")
        cold = run_child(scenario, setting, root / scenario / setting / "cold-cache",
                         root / scenario / setting / "cold")
        seconds = time.monotonic() - start
        if shared["numbers"] is not None and cold["numbers"] is not None:
            d_out, d_grad = max_diffs(shared["numbers"], cold["numbers"])
        else:
            d_out = d_grad = float("nan")
        aot = f"{shared['aot'][0]}/{shared['aot'][1]}" + (
            f" ({shared['aot'][2]} bypass)" if shared["aot"][2] else "")
        print(f"| {setting} | {shared['fx'][0]}/{shared['fx'][1]} | {aot} | "
              f"{cold['fx'][1]}/{cold['aot'][1]} | {d_out:.3g} | {d_grad:.3g} | "
              f"{verdict(shared, cold, d_out, d_grad, atol)} | {seconds:.0f} |", flush=True)


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], Path(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO",
                        help=f"{', '.join(VARIANTS)} or all (default)")
    parser.add_argument("--atol", type=float, default=1e-6,
                        help="a larger difference counts (one compiled code's CPU runs are bitwise equal)")
    parser.add_argument("--keep", type=Path, help="keep caches and numbers under this dir (must not exist)")
    parser.add_argument("--fault", choices=("none", "quota", "removed"), default="none",
                        help="what the shared dir takes between the variants (the docstring)")
    args = parser.parse_args()
    names = list(VARIANTS) if not args.scenarios or args.scenarios == ["all"] else args.scenarios
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    if args.keep:
        args.keep.mkdir(parents=True)
        for name in names:
            run_scenario(name, args.keep, args.atol, args.fault)
        return
    with tempfile.TemporaryDirectory(prefix="false-hits-") as tmp:
        for name in names:
            run_scenario(name, Path(tmp), args.atol, args.fault)


if __name__ == "__main__":
    main()
