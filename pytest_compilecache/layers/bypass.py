"""What to do about each reason torch gives for bypassing the FX-graph or AOTAutograd
cache (BypassFxGraphCache / BypassAOTAutogradCache in torch/_inductor/codecache.py and
torch/_functorch/_aot_autograd/autograd_cache.py, 2.5-2.13). Pure: no torch, no pytest."""
from __future__ import annotations

import re
from typing import List, Optional, Tuple

_CUSTOM_PASS = ("a custom pass is in the key only as a torch._inductor.custom_graph_pass."
                "CustomGraphPass whose uuid() names its code: subclass it and return a "
                "stable uuid(), e.g. torch._inductor.custom_graph_pass.get_hash_for_files"
                "((__file__,))")

# (pattern, fix): the first pattern found in the reason gives its fix
HINTS: List[Tuple[str, str]] = [
    (r"Unsupported (pre grad|post grad|joint) custom pass|Unsupported _(pre|post)_fusion_"
     r"custom_pass|Unsupported _fuse_ddp_communication_pass", _CUSTOM_PASS),
    (r"freezing enabled|frozen constants",
     "torch._inductor.config.freezing folds weights into the graph, so torch never caches "
     "it: every start compiles; serve frozen graphs from an AOTInductor package instead "
     "(--compile-cache-via=aoti checks that path)"),
    (r"FX graph cache is not enabled",
     "the FX-graph cache is off (TORCHINDUCTOR_FX_GRAPH_CACHE=0 or "
     "torch._inductor.config.fx_graph_cache = False): AOTAutograd needs it; turn it on"),
    (r"Function name: (apply|autograd_function_apply)\b",
     "a custom torch.autograd.Function: AOTAutograd caches one only with "
     "torch._functorch.config.autograd_cache_allow_custom_autograd_functions = True "
     "(TORCHINDUCTOR_AUTOGRAD_CACHE_ALLOW_CUSTOM_AUTOGRAD=1); its backward's code is then "
     "in no key, so a changed backward returns the old one (pytorch issue 144344): bump "
     "torch.compiler.config.cache_key_tag when it changes"),
    (r"autocast",
     "autocast entered inside the compiled region (torch.amp._enter_autocast in the graph): "
     "an older torch's AOTAutograd cache cannot key it; enter torch.autocast outside the "
     "compiled function, or upgrade torch"),
    (r"Function name: prim[ _](from_local|to_local|redistribute)",
     "not the test's code: Dynamo puts DTensor's from_local/to_local into the graph of "
     "every DTensor program (tensor parallel, FSDP2), and torch's AOTAutograd cache "
     "cannot key them yet (pytorch issues 167349, 152829): no change to the test makes "
     "this layer hit; the FX-graph cache under it still can"),
    (r"Unsupported call_function target|Unsupported call_method",
     "a function torch cannot key is in the graph: call it outside the compiled region, "
     "make it an op with torch.library.custom_op (keyed by its schema), or "
     "torch.fx.wrap it with a cache hash"),
    (r"Can't cache torchbind objects",
     "a TorchScript class (torchbind) object is in the graph: torch cannot key it"),
    (r"HigherOrderOperator|Can't cache HigherOrderOperators",
     "a higher-order op that torch cannot cache is in the graph (e.g. a user-defined "
     "Triton kernel or an op without cacheable()): move it out of the compiled region"),
    (r"Cannot produce stable cache key for unpicklable type|Failed to pickle cache key",
     "something in the key (a config value, a constant, a custom pass) cannot be pickled "
     "stably: the reason names its type; replace it with a plain value"),
    (r"mkldnn tensors unpickleable",
     "mkldnn tensors (torch._inductor.config.cpp.weight_prepack with freezing) cannot be "
     "cached"),
    (r"SAC context_fn does not have a cache_hash",
     "selective activation checkpointing: give your context_fn a cache_hash attribute "
     "(as torch's message says)"),
    (r"uuid\(\) returned None|raw callable without uuid",
     "an activation-memory-budget estimator or solver without a uuid(): use "
     "CustomRuntimeEstimator / CustomKnapsackSolver with a stable uuid()"),
    (r"Runtime constant folding",
     "torch._inductor.config.aot_inductor.use_runtime_constant_folding is on: turn it off "
     "for a cached compile"),
    (r"compiler bisector enabled", "torch's compiler bisector is on: unset it for production"),
    (r"No shape env",
     "the graph was compiled without a shape environment (a direct compile_fx call?): "
     "compile through torch.compile"),
    (r"fakify_first_call", "a compiled autograd / fakify-first-call graph: torch does not "
                           "cache it"),
    (r"requires triton 3.2", "AOTAutograd's cache needs triton 3.2 or later: upgrade triton"),
    (r"Reduce unsupported", "torch could not reduce (pickle) part of the graph: the reason "
                            "above names it"),
]


def fix_for(reason: Optional[str]) -> Optional[str]:
    """How to make torch cache a graph it bypassed for `reason`; None when unknown."""
    for pattern, fix in HINTS:
        if reason and re.search(pattern, reason):
            return fix
    return None
