"""torch's Redis remote caches (--compile-cache-via=remote): a new machine with an empty
disk, warmed through a Redis server."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

from pytest_compilecache import files as fs
from pytest_compilecache.layers.base import Carrier
from pytest_compilecache.model import CheckResult
from pytest_compilecache.wire import ArtifactRecord, RecordLike
from pytest_compilecache.pathoption import PathOption
from pytest_compilecache.paths.artifact import ArtifactPath
from pytest_compilecache.paths.base import Info, PhasePlan, Phases, Snapshots, WarmStartPath
from pytest_compilecache.wirejson import Wire

REDIS = PathOption("redis", "HOST:PORT of the Redis server the remote path uses (default: "
                            "a private redis-server per session, emptied before each "
                            "check's cold run; your own server's existing entries may "
                            "warm a cold run)", "HOST:PORT")


@dataclass
class RemoteStats(Wire):
    """One of torch's remote or local cache tallies (remote_cache.cache_stats), as the
    child's side writes them into its record's `remote` section."""
    hit: int = 0
    miss: int = 0
    put: int = 0
    exception: int = 0


def tallies(art: ArtifactRecord) -> Dict[str, RemoteStats]:
    """The phase's `remote` section, typed: torch's cache class -> its tally."""
    section = art.raw.get("remote")
    if not isinstance(section, dict):
        return {}
    return {str(k): RemoteStats.from_json(v) for k, v in section.items()}


class RemoteCaches(ArtifactPath):
    """torch's Redis remote caches: the cold process (empty local root) writes through to
    the server; the warm process, on another empty local root, must hit every layer that
    has a remote cache through it. A private server is started on first use and emptied
    before each check's cold run; a user's own server (--compile-cache-redis) is neither."""
    name = via = "remote"
    summary = "remote (torch's Redis remote caches: a new machine with an empty disk)"
    carrier = Carrier("the Redis server", "torch's remote caches hold FX graphs, AOTAutograd "
                                          "entries, autotune results and PGO profiles, not "
                                          "compiled kernels outside an FX entry's bundle")
    # torch's remote cache classes (torch/_inductor/remote_cache.py) and their layers
    LAYER_OF = {"RemoteFxGraphCache": "fx_graph", "RemoteAOTAutogradCache": "aot_autograd",
                "RemoteAutotuneCache": "autotune", "RemoteBundledAutotuneCache": "autotune",
                "RemoteDynamoPGOCache": "dynamo_pgo"}
    # the autotune ones are switched on in the child, on CUDA only (`watching`, below)
    ENV = {"TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1", "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE": "1",
           "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_REMOTE_PGO": "1"}

    options = (REDIS,)

    def __init__(self, address: Optional[str] = None) -> None:
        self.address = address
        self.server: Any = None

    @classmethod
    def from_settings(cls, settings: Any) -> "WarmStartPath":
        return cls(settings.path_option(REDIS.name))

    def preflight(self) -> List[str]:
        """A server (redis-server on PATH, or --compile-cache-redis answering PING now:
        one that refuses would make every check compile and then error) and, in the
        phase children, the `redis` client torch imports: found without importing it."""
        import importlib.util
        import shutil

        from pytest_compilecache.paths.redis_server import (INSTALL_HINT, parse_address,
                                                            unreachable, why_silent)

        out = []
        if importlib.util.find_spec("redis") is None:
            out.append("--compile-cache-via=remote: torch's remote caches need the redis "
                       "client package in this environment: pip install redis (from a "
                       "checkout of pytest-compilecache: pip install -e '.[remote]')")
        if self.address:
            try:
                why = why_silent(*parse_address(self.address), timeout=5.0)
            except ValueError as e:
                out.append(f"--compile-cache-redis={self.address}: {e}")
            else:
                if why:
                    out.append(unreachable(self.address, why))
        elif shutil.which("redis-server") is None:
            out.append("--compile-cache-via=remote: no redis-server on PATH to start a "
                       "private one; " + INSTALL_HINT + ", or point "
                       "--compile-cache-redis=HOST:PORT at your own server")
        return out

    def phase_env(self, plan: PhasePlan) -> Dict[str, str]:
        from pytest_compilecache.paths.redis_server import RedisServer

        if self.server is None:
            self.server = (RedisServer.users(self.address) if self.address
                           else RedisServer.start())
        if plan.name == "cold":
            self.server.flush()  # a private server: nobody's entries warm this cold run
        # a server that died since (between checks, or during the cold phase) is named
        # here, before torch's client reads the outage as misses
        self.server.ensure_answers("before the check's cold phase" if plan.name == "cold"
                                   else f"after the cold phase, before the {plan.name} phase")
        return {**self.ENV, **self.server.env()}

    def close(self) -> None:
        if self.server is not None:
            self.server.close()

    def failed(self, phase: str, rec: RecordLike, result: CheckResult) -> CheckResult:
        result = super().failed(phase, rec, result)
        if ("was not cold" in (result.error or "") and self.server is not None
                and not self.server.owned):
            result.error = (result.error or "") + (
                f"; here the likely source is your Redis server at {self.address}: it holds "
                f"entries of earlier runs (the check empties only a server of its own: leave "
                f"--compile-cache-redis out)")
        return result

    def carried(self, cold_art: ArtifactRecord, loaded: fs.Snapshot) -> str:
        puts = ", ".join(f"{n} {v.put}" for n, v in tallies(cold_art).items()
                         if v.put and n in self.LAYER_OF)
        where = (f"a private redis-server at {self.server.address}" if self.server is not None
                 and self.server.owned else f"your Redis server at {self.address} (its "
                 f"existing entries may have warmed the cold run)")
        return f"remote: {where}; the cold process put {puts or 'nothing'}"

    def rule(self, nodeid: str, recs: Phases, snaps: Snapshots, warm_new: List[str],
             timings: Dict[str, Optional[float]], triton_dir: Optional[Path]) -> CheckResult:
        res = super().rule(nodeid, recs, snaps, warm_new, timings, triton_dir)
        cold_r, warm_r = tallies(recs["cold"].artifact), tallies(recs["warm"].artifact)
        for name in sorted(set(cold_r) | set(warm_r)):
            if name not in self.LAYER_OF:  # torch's in-process and backend tallies
                continue
            c, w = cold_r.get(name) or RemoteStats(), warm_r.get(name) or RemoteStats()
            layer = self.LAYER_OF[name]
            local = warm_r.get(name.replace("Remote", "Local", 1)) or RemoteStats()
            res.notes.append(f"remote {layer} ({name}): cold put {c.put}; warm hit "
                             f"{w.hit}, miss {w.miss} (its empty local "
                             f"disk: miss {local.miss})")
            if w.exception or c.exception:
                res.problems.append(f"remote {layer}: {name} raised {c.exception} "
                                    f"exception(s) cold and {w.exception} warm")
            elif c.put and w.miss and not w.hit:
                res.problems.append(f"remote {layer}: the warm process missed {name} "
                                    f"{w.miss} time(s) and hit it never, though the cold "
                                    f"one put {c.put} entr(ies)")
            elif w.miss and not c.put:
                res.problems.append(f"remote {layer}: the warm process missed {name} "
                                    f"{w.miss} time(s): the server holds nothing the cold "
                                    f"process put there")
        if self.server is not None and self.server.keys() is None:
            # torch's client reads a refused connection as a miss: what the layers say
            # follows from the outage, and the check is the server's error
            res.problems.insert(0, "remote: " + self.server.gone(
                "DBSIZE got no reply", "during the warm phase")
                + "; the remote caches were unreachable, so what follows is its "
                  "consequence")
            res.fault = True
        return res  # its problems become the verdict in ArtifactPath.judge

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
