"""What every body shares: its cache dir, its process group, its counters and outputs.

Imported first by each body (before torch), so that the private-dir launch can point
each rank at a cache dir no other rank writes before torch reads the environment.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import List, Optional

RANK = int(os.environ["RANK"])
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", RANK))
DEVICE = os.environ.get("PLAIN_PAIR_DEVICE", "cpu")  # cpu, cuda:index or cuda:pinned
if DEVICE == "cuda:pinned":  # each rank sees only its GPU, as cuda:0
    os.environ["CUDA_VISIBLE_DEVICES"] = str(LOCAL_RANK)
_PRIVATE = os.environ.get("PLAIN_PAIR_PRIVATE")
if _PRIVATE:  # the private-dir launch: this rank's own root
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = f"{_PRIVATE}/rank{RANK}/inductor"
    os.environ["TRITON_CACHE_DIR"] = f"{_PRIVATE}/rank{RANK}/inductor/triton"

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

OUT = Path(os.environ["PLAIN_PAIR_OUT"])


def _keep(kind: str, seen: List[int], key: str, data: bytes) -> None:
    (OUT / "keys").mkdir(exist_ok=True)
    (OUT / "keys" / f"rank{RANK}-{kind}{seen[0]}-{key}.pkl").write_bytes(data)
    seen[0] += 1


def _keep_key_bytes() -> None:
    """Observe the bytes each cache key hashes (PLAIN_PAIR_KEYS=1), as torch pickles them:
    the FX graph key (FxGraphCachePickler.get_key) and the AOTAutograd key (the first
    get_hash of each AOTAutogradCachePickler; the later ones are its debug lines)."""
    from torch._functorch._aot_autograd import autograd_cache as aot
    from torch._inductor import codecache

    fx_seen, aot_seen = [0], [0]

    def get_key(self: codecache.FxGraphCachePickler, obj: object) -> str:
        data = self.dumps(obj)
        key = codecache.FX_GRAPH_CACHE_KEY_STRATEGY.key(data)
        _keep("fx", fx_seen, key, data)
        return key

    def get_hash(self: codecache.FxGraphCachePickler, obj: object) -> str:
        data = self.dumps(obj)
        key = codecache.COMPACT_CACHE_KEY_STRATEGY.key(data)
        if not getattr(self, "_plain_pair_kept", False):
            self._plain_pair_kept = True  # type: ignore[attr-defined]
            _keep("aot", aot_seen, key, data)
        return key

    codecache.FxGraphCachePickler.get_key = get_key  # type: ignore[method-assign]
    aot.AOTAutogradCachePickler.get_hash = get_hash  # type: ignore[method-assign]


def device() -> torch.device:
    """This rank's device: the CPU, cuda:<local rank>, or its only GPU as cuda:0."""
    if DEVICE == "cpu":
        return torch.device("cpu")
    return torch.device("cuda", 0 if DEVICE == "cuda:pinned" else LOCAL_RANK)


def start() -> int:
    """The process group (gloo on CPU, NCCL on CUDA), torchrun's env rendezvous;
    returns the rank. plain_once.py's compiling process (PLAIN_ONCE_GROUP=fake) makes a
    fake group of WORLD_SIZE ranks, itself rank 0, as torchtitan's precompile_main.py
    does; a replica (PLAIN_ONCE_GROUP=none) makes none."""
    if os.environ.get("PLAIN_PAIR_KEYS") == "1":
        _keep_key_bytes()
    group = os.environ.get("PLAIN_ONCE_GROUP")
    if group == "fake":
        dist.init_process_group("fake", rank=RANK, world_size=int(os.environ["WORLD_SIZE"]))
    elif group == "none":
        pass
    elif DEVICE == "cpu":
        dist.init_process_group("gloo")
    else:
        torch.cuda.set_device(device())
        dist.init_process_group("nccl", device_id=device())
    return RANK


def finish(out: torch.Tensor, losses: Optional[List[float]] = None) -> None:
    """Write this rank's counters and outputs; destroy the process group."""
    aot = counters["aot_autograd"]
    result = {
        "rank": RANK,
        "fx": [counters["inductor"]["fxgraph_cache_hit"],
               counters["inductor"]["fxgraph_cache_miss"]],
        "aot": [aot["autograd_cache_hit"], aot["autograd_cache_miss"],
                aot["autograd_cache_bypass"]],
        "losses": losses,
        "checksum": out.double().sum().item(),
    }
    torch.save(out.detach().cpu(), OUT / f"rank{RANK}.pt")
    (OUT / f"rank{RANK}.json").write_text(json.dumps(result))
    if dist.is_initialized():
        dist.destroy_process_group()
