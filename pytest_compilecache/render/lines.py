"""A check and a session as text: the failure report of one check (pytest's failure
section, `show`), the end-of-session summary table and what follows it (the terminal,
`show`, the job summary's cells). Pure functions from CheckResult to lines."""
from __future__ import annotations

from collections import Counter
from typing import Dict, List, Optional, Sequence, Tuple

from pytest_compilecache import layers
from pytest_compilecache.history.manifest import changed_components, drift_lines
from pytest_compilecache.judge import recompiles
from pytest_compilecache.model import WARM_START_KEY, CheckResult
from pytest_compilecache.render.ranks import rank_cells, rank_lines


def _s(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.1f}"


def ratio(result: CheckResult) -> Optional[float]:
    """warm/cold, or None where cold shows as 0.0 s (nothing compiled): a ratio of two
    near-zero times says nothing."""
    c, w = result.timings.get("cold_s"), result.timings.get("warm_s")
    return None if c is None or c < 0.05 or w is None else w / c


def first_reason(r: CheckResult, width: int = 300) -> str:
    """One line: why the check did not pass (the short test summary, JUnit's message)."""
    text = r.problems[0] if r.problems else next(
        (line.strip() for line in (r.error or "").splitlines() if line.strip()), r.verdict)
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"


def judged_layers(r: CheckResult) -> List[str]:
    """The layers a result judged, the registry's order first: a report written before
    a layer was registered has no entry for it (nothing to show), one written by a
    plugin with a layer this one lacks keeps its rows, after the known ones."""
    known = [n for n in layers.LAYERS if n in r.layers]
    return known + [n for n in r.layers if n not in layers.LAYERS]


def failure_lines(r: CheckResult) -> List[str]:
    where = ", ".join(x for x in (r.device_name or r.device, _torch(r)) if x)
    lines = [f"compile-cache check {r.verdict.upper()}: {r.label}" + (f" ({where})" if where else "")]
    other = [p for p in r.problems if p.split(":")[0] not in layers.LAYERS]
    if r.verdict == "error" and other and not r.error:  # the cause (a full disk) before the table
        lines += ["", *_indented(other)]
        other = []
    if r.error:
        if other:  # the cause first (a damaged cache), then the failure it led to
            lines += ["", *_indented(other), "", "  which led to:"]
            other = []
        lines += ["", *r.error.splitlines()]
    if r.layers:
        names = judged_layers(r)
        w = max(7, *(len(r.layers[n].state) for n in names))  # `accepted` is 8
        lines += ["", f"  {'layer':<13} {'state':<{w}} {'cold':<24} {'warm':<24}"]
        for name in names:
            lv = r.layers[name]
            lines.append(f"  {name:<13} {lv.state:<{w}} {lv.cold:<24} {lv.warm:<24}")
        # a layer that missed, and one a setting switched off (named with where it was set)
        why = [(n, reason) for n in names for reason in r.layers[n].reasons
               if r.layers[n].state in ("miss", "bypass", "accepted")
               or (r.layers[n].state == "off" and r.layers[n].setting)]
        if why:
            lines += ["", "  why:"]
            lines += [f"  - {n}: {reason}" for n, reason in why]
        for n in names:
            for f in r.layers[n].files[:8]:
                lines.append(f"    warm wrote ({n}): {f}")
        lines += rank_lines(r)  # a multi-rank check's ranks (render/ranks.py)
        for row in r.graphs:
            if row.get("graph_code_diff"):
                lines += ["", f"  graph code diff, {row['layer']} graph {row['compile_id']}:"]
                lines += ["    " + x for x in row["graph_code_diff"]]
    if other:
        lines += ["", *_indented(other)]
    out = r.outputs or {}
    if out.get("unseen"):  # no comparison line reads `equal` over nothing, or eager code
        lines.append(f"  outputs: {out['unseen']}")
    elif out.get("warm_vs_cold"):
        c = out["warm_vs_cold"]
        lines.append(f"  outputs: warm vs cold ({c.get('mode')}): "
                     f"{'equal' if c.get('ok') else 'DIFFER'} ({c.get('compared')} compared)")
    e = out.get("warm_vs_eager") or {}
    if e.get("rule") and not out.get("unseen"):
        worst = (e.get("float64") or {}).get("worst")
        judged = eager_coverage(r)
        lines.append(f"  outputs: warm compiled vs eager ({e['rule']}): "
                     f"{'close' if e.get('ok') else 'DIFFER'}" + (f"; {judged}" if judged else "")
                     + (f"; furthest from float64: {worst['name']}, RMSE {worst['rmse']:.3g} vs "
                        f"eager's {worst['reference_rmse']:.3g} (allowed {worst['limit']:.3g})"
                        if worst else ""))
    fresh = out.get("fresh_vs_warm") or {}
    if fresh.get("mode"):  # a path's reference (the deploy scenario: this commit compiled afresh)
        lines.append(f"  outputs: warm vs a fresh compile ({fresh['mode']}): "
                     f"{'equal' if fresh.get('ok') else 'DIFFER'} "
                     f"({fresh.get('compared')} compared)")
    lines += _drift_lines(r)
    job = (r.job_id or {}).get("warm")
    pgo = r.layers.get("dynamo_pgo")
    if job and pgo is not None and pgo.state == "miss":
        lines.append(f"  PGO job id: {job['value']!r} ({job.get('source')})" if job.get("value")
                     else "  PGO job id: none (not in the environment, not set in code)")
    lines += [f"  note: {n}" for n in r.notes]
    if r.timings.get("cold_s") is not None:
        lines.append(f"  compile+run: cold {_s(r.timings.get('cold_s'))} s, warm "
                     f"{_s(r.timings.get('warm_s'))} s")
    if r.cache_root:
        lines.append(f"  cache root kept: {r.cache_root}")
    return lines


def _indented(problems: List[str]) -> List[str]:
    """A problem a line each (a false hit's reads as several: judge/false_hits.py)."""
    return [f"  {line}" for p in problems for line in p.splitlines()]


def eager_coverage(r: CheckResult, partial_only: bool = False) -> Optional[str]:
    """How much of the check compiled vs eager judged, in a few words: "3 of 11 tensors
    compared (8 change with the random seed)". A check that passes with most of its
    tensors unjudged by eager (dropout, a training step) must say so where it is read,
    not only in the JSON report. `partial_only`: None where eager judged them all."""
    out = r.outputs or {}
    e = out.get("warm_vs_eager") or out.get("cold_vs_eager") or {}
    total, compared = e.get("total"), e.get("compared")
    if e.get("ok") is None and e.get("note"):
        return "eager judged nothing: " + _cut(str(e["note"]).splitlines()[0], 160)
    if not isinstance(total, int) or not isinstance(compared, int) or total <= 0:
        return None
    if compared >= total:
        return None if partial_only else (f"all {total} tensors compared" if total > 1
                                          else "its 1 tensor compared")
    seeded = len(out.get("random") or []) or e.get("random_count") or len(e.get("random") or [])
    why = f" ({seeded} change{'s' if seeded == 1 else ''} with the random seed)" if seeded else ""
    of = f"of {total} tensor{'s' if total > 1 else ''} compared"
    if compared == 0:
        return f"0 {of}: eager judged nothing{why}"
    return f"{compared} {of}{why}"


def _drift_lines(r: CheckResult) -> List[str]:
    out: List[str] = []
    if r.drift and r.drift.get("status") not in (None, "unchanged"):
        out += ["", f"  keys against the baseline {r.drift.get('base')}:"]
        out += ["  " + x for x in drift_lines(r.nodeid, r.drift)]
    if r.repeat and r.repeat.get("status") == "nondeterministic":
        out += ["", "  keys of a second cold run (relocated cache root and working directory):"]
        out += ["  " + x for x in drift_lines(r.nodeid, {**r.repeat, "status": "differ"})[1:]]
    return out


def _torch(r: CheckResult) -> str:
    v = (r.versions or {}).get("torch")
    return f"torch {v}" if v else ""


def row_cells(r: CheckResult) -> Tuple[List[str], Tuple[str, str, str]]:
    """One check's row of the summary table (terminal and job summary): each layer's
    state, then cold s, warm s, warm/cold. A recording's seconds (a compile stopped once
    its keys were logged, or a cold run alone) are no cold start, also where the
    recording failed on drift: recorded_line says them."""
    q = ratio(r)
    cold = None if _recording(r) else r.timings.get("cold_s")
    return ([r.layers[n].state if n in r.layers else "-" for n in layers.LAYERS],
            (_s(cold), _s(r.timings.get("warm_s")), "-" if q is None else f"{q:.2f}"))


def _recording(r: CheckResult) -> bool:
    """A recording of keys, whatever its verdict became (drift fails it)."""
    return "recorded" in (r.verdict, r.kind)


def recorded_line(results: Sequence[CheckResult]) -> List[str]:
    """The recordings' seconds, out of the cold s column."""
    took = [r.timings.get("cold_process_s") for r in results if _recording(r)]
    if not took:
        return []
    known = [t for t in took if t is not None]
    return [f"recorded: the keys of {len(took)} check(s)"
            + (f" in {sum(known):.1f} s of phase processes" if known else "")
            + " (a recording compiles cold once, maybe stopped before code generation: "
              "no cold or warm start is timed)"]


def fit(label: str, width: int) -> str:
    """A node id in `width` characters, its test name kept: the directory part goes
    first (the file name stays while it can), then the middle of the test name."""
    if len(label) <= width:
        return label
    path, sep, test = label.partition("::")
    room = width - len(sep) - len(test)
    if not sep or room < 2:
        return _middle(test if sep else label, width)
    name = path.rsplit("/", 1)[-1]
    if len(name) + 2 < room:
        return path[:room - len(name) - 2] + "…/" + name + sep + test
    return "…" + path[len(path) - room + 1:] + sep + test


def _middle(text: str, width: int) -> str:
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


FOLDED = ("pass", "recorded")  # under -q, counted rather than listed


def summary_lines(results: Sequence[CheckResult], quiet: bool = False,
                  verbose: bool = False) -> List[str]:
    """The terminal summary: failing and erroring checks first, then the rest in the order
    they ran; `quiet` (-q) folds the passing and recorded ones into one count, so that a
    session of hundreds of checks shows what needs reading; `verbose` (-v) adds what the
    passing ones noted (a failing one's notes are in its report)."""
    if not results:
        return []
    first = [r for r in results if r.verdict in ("fail", "error")]
    results = first + [r for r in results if r.verdict not in ("fail", "error")]
    folded = [r for r in results if quiet and r.verdict in FOLDED]
    if folded:
        results = [r for r in results if r.verdict not in FOLDED]
    lines = _table(results) + _folded_line(folded) + recorded_line([*results, *folded])
    lines += _eager_lines(results, folded)
    lines += _unseen_lines(results, folded)
    lines += _accepted_lines(results, folded)
    lines += _sections(results)
    lines += _notes_lines(results) if verbose else []
    devices = sorted({r.device for r in [*results, *folded] if r.device})
    if devices == ["cpu"]:
        lines.append("note: checks ran on CPU (no CUDA device in the check process, or "
                     "--compile-cache-device=cpu); Triton and GPU autotune layers were not exercised")
    return lines


def _notes_lines(results: Sequence[CheckResult]) -> List[str]:
    """What the passing and recorded checks found that is not a failure (the variants
    that shared an entry, why they compiled their own): one line per note."""
    said = [f"  {r.label}: {n}" for r in results if r.verdict in FOLDED for n in r.notes]
    return ["", "notes of passing checks:", *said] if said else []


def _folded_line(folded: Sequence[CheckResult]) -> List[str]:
    if not folded:
        return []
    counts = Counter(r.verdict for r in folded)
    said = " and ".join(f"{n} {'passed' if v == 'pass' else v}" for v, n in sorted(counts.items()))
    return [f"... and {len(folded)} more check(s): {said} (listed without -q)"]


def _accepted_lines(results: Sequence[CheckResult], folded: Sequence[CheckResult]
                    ) -> List[str]:
    """Each listed check's accepted warm-start cost, one line per layer (what it costs
    stays in sight although it no longer fails); the folded ones counted."""
    lines = [f"accepted: {r.label}: {n} ({lv.accepted}): "
             + _cut(lv.reasons[1] if len(lv.reasons) > 1 else "", 200)
             for r in results for n, lv in r.layers.items() if lv.state == "accepted"]
    hidden = sum(1 for r in folded if any(lv.state == "accepted" for lv in r.layers.values()))
    if hidden:
        lines.append(f"... of which {hidden} passed with an accepted warm-start cost "
                     f"(listed without -q)")
    return lines


def _eager_lines(results: Sequence[CheckResult], folded: Sequence[CheckResult]) -> List[str]:
    """Each listed check whose eager comparison judged only part of its tensors, one
    line each (a failing one says it in its report too); the folded ones counted."""
    lines = [f"{r.label}: outputs: warm compiled vs eager: {said}" for r in results
             if r.verdict not in ("fail", "error")
             for said in [eager_coverage(r, partial_only=True)] if said]
    partial = sum(1 for r in folded if eager_coverage(r, partial_only=True))
    if partial:
        lines.append(f"... of which {partial} compared only part of their tensors with eager "
                     f"(listed without -q)")
    return lines


def _unseen_lines(results: Sequence[CheckResult], folded: Sequence[CheckResult]) -> List[str]:
    """Each listed check that compared no output (or only eager code), one line each,
    a passing one too (a failing one says it in its report); the folded ones counted."""
    lines = [f"{r.label}: outputs: {(r.outputs or {})['unseen']}" for r in results
             if r.verdict not in ("fail", "error") and (r.outputs or {}).get("unseen")]
    hidden = sum(1 for r in folded if (r.outputs or {}).get("unseen"))
    if hidden:
        lines.append(f"... of which {hidden} compared no output (listed without -q)")
    return lines


def _table(results: Sequence[CheckResult]) -> List[str]:
    if not results:
        return []
    width = min(60, max(len("check"), *(len(r.label) for r in results)))
    head = (f"{'check':<{width}} {'verdict':<7} "
            + " ".join(f"{layers.SHORT[n]:<8}" for n in layers.LAYERS)
            + f" {'cold s':>7} {'warm s':>7} {'warm/cold':>9}")
    lines = [head]
    for r in results:
        name = fit(r.label, width)
        states, (cold, warm, q) = row_cells(r)
        cells = " ".join(f"{c:<8}" for c in states)
        lines.append(f"{name:<{width}} {r.verdict:<7} {cells} {cold:>7} {warm:>7} {q:>9}")
        lines += [f"{label:<{width}} {verdict:<7} " + " ".join(f"{c:<8}" for c in states)
                  for label, verdict, states in rank_cells(r)]
    return lines


def _sections(results: Sequence[CheckResult]) -> List[str]:
    """What follows the table, for the checks it lists: the warm start by path, the
    recompiles, the drift against the baseline."""
    lines: List[str] = []
    paths = warm_start_by_path(results)
    if paths:
        widths = _widths(paths)
        lines += ["", WARM_START_TITLE]
        lines += ["  ".join(f"{c:<{w}}" for c, w in zip(row, widths)).rstrip()
                  for row in [paths[0], *paths[1]]]
        lines += [f"n/a: {r.label}: " + _cut(r.notes[0] if r.notes else "", 240)
                  for r in results if r.verdict == "n/a"]
    recompiled = [(r, line) for r in results for line in recompiles.lines(r.dynamo or {})]
    if recompiled:
        lines += ["", RECOMPILES_TITLE]
        lines += [f"  {r.label}: {line}" for r, line in recompiled]
    drifted = [r for r in results if r.drift]
    if drifted:
        lines.append(f"keys against the baseline {drifted[0].drift.get('base')}:")
        for r in drifted:
            changed = changed_components(r.drift)
            lines.append(f"  {r.drift.get('status'):<9} {r.nodeid}" +
                         (f"  ({', '.join(changed[:6])})" if changed else ""))
    return lines


RECOMPILES_TITLE = ("recompiles (Dynamo traced a code object more than once; every restart "
                    "traces it again, cache or not):")
WARM_START_TITLE = ("warm start by path, seconds from loading the artifact to the first "
                    "result (the local restart: its warm run):")


def warm_start_seconds(r: CheckResult) -> str:
    """One cell of the per-path table: the warm run's seconds, or why there are none."""
    if r.verdict in ("n/a", "error", "not run"):
        return r.verdict
    # a path whose warm start is another phase than the private warm run names it
    # (the shared variants' turn over their one cache: paths/shared.py)
    w = r.timings.get(WARM_START_KEY, r.timings.get("warm_s"))
    return ("-" if w is None else f"{w:.1f}") + (" (fail)" if r.verdict == "fail" else "")


def warm_start_by_path(results: Sequence[CheckResult]
                       ) -> Optional[Tuple[List[str], List[List[str]]]]:
    """A check per row, a warm-start path per column: what each deployment path buys on
    this model. None when only the local restart ran, or no check is listed (under -q
    every one passed)."""
    vias = list(dict.fromkeys(r.via for r in results))
    if vias in ([], ["local"]):
        return None
    cells: Dict[str, Dict[str, str]] = {}
    for r in results:
        cells.setdefault(r.nodeid, {})[r.via] = warm_start_seconds(r)
    return (["check", *vias],
            [[nodeid, *(row.get(v, "-") for v in vias)] for nodeid, row in cells.items()])


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _widths(table: Tuple[List[str], List[List[str]]]) -> List[int]:
    head, rows = table
    return [min(60, max(len(x[i]) for x in [head, *rows])) for i in range(len(head))]
