"""The session's end on the terminal: the compile-cache summary (failures first, the
rest folded under -q), what was kept, and where the report went."""
from __future__ import annotations

from typing import Any, Callable, Iterable, List, Optional, Sequence

from pytest_compilecache.history.store import kept_beside
from pytest_compilecache.model import CheckResult
from pytest_compilecache.render.lines import summary_lines

NO_CHECKS = ("--compile-cache-check selected no check: no collected test carries the "
             "compile_cache marker (mark a test or its module with "
             "@pytest.mark.compile_cache, in the file or in a conftest's "
             "pytest_collection_modifyitems; -k, -m and --compile-cache-shard can leave none)")


def write_summary(tr: Any, results: Sequence[CheckResult], *, verbosity: int,
                  no_checks: Optional[str], gone: Iterable[str], manifests: Iterable[str],
                  root: Optional[str], report: Optional[str], report_problem: Optional[str],
                  report_said: List[str],
                  dirty: Callable[[], Optional[str]] = lambda: None) -> None:
    """Write the summary through pytest's terminal reporter `tr`; `dirty`: the line
    saying the work tree is dirty, asked only where a check ran."""
    if no_checks:
        tr.write_sep("=", "compile-cache: no check ran", yellow=True, bold=True)
        tr.write_line(no_checks, yellow=True)
    if not results:
        if report_problem:
            tr.write_line(f"report NOT written: {report_problem}", red=True, bold=True)
        return
    tr.write_sep("=", "compile-cache summary")
    for line in summary_lines(results, quiet=verbosity < 0, verbose=verbosity > 0):
        tr.write_line(line)
    for nodeid in gone:
        tr.write_line(f"  gone      {nodeid} (in the baseline, not here)")
    for path in sorted(manifests):
        tr.write_line(f"key manifest: {path}")
        newer = kept_beside(path)
        if newer:  # said even under -q: the store holds two files of one commit now
            tr.write_line(f"  note: {newer} was written by a newer pytest-compilecache; it "
                          f"is kept as it was, and this session's keys went beside it",
                          yellow=True)
    dirty_said = dirty()
    if dirty_said:
        tr.write_line(dirty_said, yellow=True)
    kept = [r for r in results if r.cache_root]
    if kept:
        where = f" --root {root}" if root else ""
        tr.write_line(f"{len(kept)} cache root(s) kept for inspection; "
                      f"`pytest-compilecache clean{where}` removes them "
                      f"once they are an hour old (--min-age 0: now)")
    if report_problem:
        tr.write_line(f"report NOT written: {report_problem}", red=True, bold=True)
    elif report:
        tr.write_line(f"report written to {report}")
        for line in report_said:
            tr.write_line(f"  note: {line}", yellow=True)
