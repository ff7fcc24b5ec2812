"""Compiled kernels: Triton's cache and Inductor's C++ kernels (and the precompiled
headers they share)."""
from __future__ import annotations

from typing import List, Tuple

from pytest_compilecache.judge.kernels import kernels_layer
from pytest_compilecache.layers.base import CacheLayer, LayerInputs
from pytest_compilecache.model import LayerVerdict


class Kernels(CacheLayer):
    name, short, short_md = "kernels", "kernels", "kernels"
    observed = ("Triton compiles in the phase (a compile listener where Triton has one) "
                "and the kernel files the phase wrote")
    heads = ("triton",)
    tops = ("triton", "tmp")
    suffixes = (".so", ".cpp", ".o", ".h", ".cubin", ".ptx", ".ttir", ".ttgir", ".llir",
                ".hsaco", ".json", ".source")

    def owns_top(self, parts: List[str]) -> bool:
        """Triton's own dir; in the temp dir, only the precompiled headers."""
        return parts[0] == "triton" or (parts[0] == "tmp" and "precompiled_headers" in parts)

    def judge(self, inputs: LayerInputs) -> Tuple[LayerVerdict, List[str]]:
        return kernels_layer(inputs.cold, inputs.warm, inputs.cold_files), []
