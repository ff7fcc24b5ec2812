"""A multi-rank check's ranks (`CheckResult.ranks`, judge/ranks.py; a replicated
check's replicas, each row's `noun`), under its row in every output: a row each in the
summary tables (terminal and job summary), and in the check's own section a line each
with its layers, its outputs and what it loaded of the others' entries. Pure: data to
lines."""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

from pytest_compilecache import layers
from pytest_compilecache.judge.ranks import COMPILER, COMPILING
from pytest_compilecache.model import CheckResult


def rank_cells(r: CheckResult) -> List[Tuple[str, str, List[str]]]:
    """(label, verdict, each layer's state) of each rank, in the summary's layer order."""
    return [(f"  {_noun(row)} {row.get('rank')}", str(row.get("verdict", "")),
             [str(((row.get("layers") or {}).get(n) or {}).get("state", "-"))
              for n in layers.LAYERS])
            for row in r.ranks]


def rank_lines(r: CheckResult) -> List[str]:
    """The check's section: a line per rank."""
    if not r.ranks:
        return []
    out = ["", f"  {_noun(r.ranks[0])}s ({len(r.ranks)}):"]
    for row in r.ranks:
        states = ", ".join(f"{n} {s.get('state')}" for n, s in (row.get("layers") or {}).items()
                           if n in ("aot_autograd", "fx_graph"))
        out.append(f"  - {_noun(row)} {row.get('rank')}: {row.get('verdict')}; {states}; "
                   f"outputs {_outputs(row.get('outputs') or {})}{_loaded(row)}")
    return out


def _noun(row: Dict[str, Any]) -> str:
    return str(row.get("noun") or "rank")


def _outputs(outputs: Dict[str, Any]) -> str:
    said = []
    for key, what in (("warm_vs_cold", "warm vs cold"), ("warm_vs_eager", "vs eager"),
                      ("private_vs_warm", "vs its own compile")):
        c = outputs.get(key) or {}
        if c.get("ok") is not None:
            said.append(f"{what} {'equal' if c['ok'] else 'DIFFER'}")
    return ", ".join(said) or "not compared"


def _loaded(row: Dict[str, Any]) -> str:
    loaded = row.get("loaded_from_other_ranks") or []
    if not loaded:
        return ""
    by = sorted({e.get("writer") for e in loaded}, key=str)
    if by == [COMPILER]:
        return f"; loaded {len(loaded)} entr(ies) {COMPILING} wrote"
    return f"; loaded {len(loaded)} entr(ies) {_noun(row)}(s) {', '.join(map(str, by))} wrote"
