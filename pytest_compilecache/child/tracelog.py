"""What the phase child hears from torch's loggers: the structured trace (cache keys,
components, bypass reasons, PGO reads and writes, frame compiles), AOTAutograd's key
details (computed only for a DEBUG logger) and Dynamo's recompile-limit warning.
Handlers only: child/probe.py installs them. No torch import."""
from __future__ import annotations

import json
import logging
import re
from typing import Any, Dict, List

TRACE_LOGGER = "torch.__trace"
AOT_LOGGER = "torch._functorch._aot_autograd.autograd_cache"
_COMPONENT_RE = re.compile(r"^\[([0-9a-z]+)\] ([^:]+?): (.*)$", re.S)
GM_MAXLEN = 20000
VALUE_MAXLEN = 200


def parse_components(lines: Any) -> List[List[Any]]:
    """'[hash] name: value' debug lines -> [[name, hash, value]]; graph code kept long."""
    out: List[List[Any]] = []
    for line in lines or []:
        m = _COMPONENT_RE.match(str(line))
        if not m:
            continue
        h, name, value = m.groups()
        lim = GM_MAXLEN if name == "gm" else VALUE_MAXLEN
        out.append([name, h, value if len(value) <= lim else value[:lim] + "..."])
    return out


# what a Dynamo frame compile's `compilation_metrics` event says of it (torch 2.5+;
# recompile_reason 2.6+): the code object, and why it failed (the recompile limit)
_FRAME_FIELDS = ("co_name", "co_filename", "co_firstlineno", "fail_type", "fail_reason",
                 "recompile_reason")
DYNAMO_LOGGER = "torch._dynamo.convert_frame"
_LIMIT_MSG = "torch._dynamo hit config."


def _cut(value: Any, limit: int = 1000) -> Any:
    return value[:limit] if isinstance(value, str) else value


class LimitHandler(logging.Handler):
    """Dynamo's warning that a code object reached its recompile limit (torch 2.5+:
    `cache_size_limit`, 2.7+: `recompile_limit`): its later calls run eagerly."""

    def __init__(self, sink: List[Dict[str, Any]]) -> None:
        super().__init__(logging.WARNING)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        if not str(record.msg).startswith(_LIMIT_MSG):
            return
        args = record.args if isinstance(record.args, tuple) else ()
        if len(args) >= 4:
            self.sink.append({"limit": f"{args[0]} ({args[1]})", "function": str(args[2]),
                              "reason": _cut(str(args[3]))})
        else:
            self.sink.append({"limit": record.getMessage().splitlines()[0][len(_LIMIT_MSG):],
                              "function": None, "reason": None})


class SkipFilter(logging.Filter):
    """Dynamo's `skipping: <frame> (reason: ..., file: ...)` DEBUG line (every torch
    2.5+), kept (a few distinct ones); the logger's records below `passes` (the level
    the user's logging let through before the logger was opened to DEBUG) go no further."""

    KEEP = 8

    def __init__(self, sink: List[str], passes: int) -> None:
        super().__init__()
        self.sink = sink
        self.passes = passes

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("skipping: ") and len(self.sink) < self.KEEP:
            args = record.args if isinstance(record.args, tuple) else ()
            text = (f"{args[0]} ({args[1]}: {str(args[2]).split('site-packages/')[-1]})"
                    if len(args) == 3 else _cut(record.getMessage(), 300))
            if text not in self.sink:
                self.sink.append(text)
        return record.levelno >= self.passes


class TraceHandler(logging.Handler):
    WANT = ("fx_graph_cache", "aotautograd_cache", "triton_kernel_info", "recompile_reasons")

    def __init__(self, sink: List[Any]) -> None:
        super().__init__(logging.DEBUG)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        meta = getattr(record, "metadata", None)
        if not isinstance(meta, dict):
            return
        if isinstance(meta.get("compilation_metrics"), dict):  # one per Dynamo frame compile
            m = meta["compilation_metrics"]
            self.sink.append(("compilation_metrics", str(m.get("compile_id")),
                              {k: _cut(m.get(k)) for k in _FRAME_FIELDS}))
            return
        art = meta.get("artifact")
        name = art.get("name") if isinstance(art, dict) else None
        if not name or not (name.startswith(self.WANT) or name.endswith("code_state")):
            return
        payload = getattr(record, "payload", None)
        data: Any = payload
        if payload and not name.endswith("code_state"):
            try:
                data = json.loads(payload)
            except Exception:
                pass
        cid = (f"{meta.get('frame_id')}/{meta.get('frame_compile_id')}"
               if "frame_id" in meta else "?")
        self.sink.append((name, cid, data))


class AotDebugHandler(logging.Handler):
    """torch 2.12+ computes AOTAutograd key components only for a DEBUG logger."""

    def __init__(self, sink: Dict[str, List[str]]) -> None:
        super().__init__(logging.DEBUG)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.msg
        if (isinstance(msg, str) and msg.startswith("Autograd graph cache hash details")
                and isinstance(record.args, tuple) and len(record.args) > 1):
            body = str(record.args[1])
            parts = body.split("\n[")
            self.sink[str(record.args[0])] = [p if i == 0 else "[" + p
                                              for i, p in enumerate(parts)]
