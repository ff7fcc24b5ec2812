"""A restart on another GPU (--compile-cache-warm-on-other-gpu[=index|pinned]): the
`other_gpu` path in the local restart's place, its layout given to the leases."""
from __future__ import annotations

import argparse
from pytest_compilecache.scenarios.base import FOR_LOCAL, Scenario

# how the warm phase's GPU looks to it
OTHER_GPU_LAYOUTS = ("index", "pinned")


def parse_other_gpu(value: str) -> str:
    """index (the option alone): both phases see both GPUs, warm uses the second
    (cuda:1); pinned: each phase sees only its GPU, as cuda:0 (CUDA_VISIBLE_DEVICES set
    per process, the fleet layout that lets GPUs share entries); off (the ini's false)."""
    v = value.strip().lower()
    v = {"true": "index", "1": "index", "yes": "index", "false": "", "0": "", "no": "",
         "off": ""}.get(v, v)
    if v and v not in OTHER_GPU_LAYOUTS:
        raise argparse.ArgumentTypeError(
            f"{value!r}: the layouts are index (both GPUs visible, warm on cuda:1) and pinned "
            f"(each phase sees only its GPU, as cuda:0)")
    return v


class WarmOnOtherGpu(Scenario):
    name = "other_gpu"
    switch = "warm-on-other-gpu"
    stands_in = FOR_LOCAL
    parse = staticmethod(parse_other_gpu)
    metavar, bare = "index|pinned", "index"
    help = ("run the warm phase on another GPU than the cold one, as a restart that lands "
            "on any device: index (the option alone: both phases see both GPUs, cold uses "
            "cuda:0, warm cuda:1; torch's keys hold the index, so warm misses) or pinned "
            "(each phase sees only its GPU as cuda:0, the fleet layout that shares "
            "entries). Where the warm run loads entries built on the other GPU, a fresh "
            "compile on the warm GPU is its reference")

