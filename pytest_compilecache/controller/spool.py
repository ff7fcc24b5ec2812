"""The session's checks, kept flat: each check's full result goes to disk as it finishes
(JSON, in the session's private results directory, beside what xdist workers publish
there), and the controller keeps only its summary row (CheckResult.summary_row) until
the session ends; the report is then streamed from those files, one check at a time.
A session of 200 checks holds 200 rows, not 200 results with their graphs and outputs.
No pytest, no torch.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from pytest_compilecache.files import write_json_atomic
from pytest_compilecache.model import CheckResult

PREFIX = "check-"  # the controller's own files; a worker's are `result-` (ledger.py)


class Spool:
    """`directory`: where the full results go (None: kept in memory, as a session built
    without one, in a unit test, has them)."""

    def __init__(self, directory: Optional[str]) -> None:
        self.directory = Path(directory) if directory else None
        self.rows: List[CheckResult] = []  # every check's summary row, in order
        self._full: List[Union[Path, CheckResult]] = []  # where each row's result is

    def add(self, result: CheckResult) -> CheckResult:
        """Keep `result` (on disk where the session has a directory, else, or where the
        write is refused, in memory); return its row."""
        if self.directory is not None:
            path = self.directory / f"{PREFIX}{len(self._full):06d}.json"
            try:
                write_json_atomic(path, result.to_json())
                return self._keep(result.summary_row(), path)
            except OSError:  # a full disk: the check still reaches the report
                pass
        return self._keep(result, result)

    def adopt(self, path: Path, result: CheckResult) -> CheckResult:
        """A result already on disk at `path` (an xdist worker's): its row is kept."""
        return self._keep(result.summary_row(), path)

    def _keep(self, row: CheckResult, full: Union[Path, CheckResult]) -> CheckResult:
        self.rows.append(row)
        self._full.append(full)
        return row

    def ids(self) -> List[Tuple[str, str]]:
        return [(r.nodeid, r.via) for r in self.rows]

    def checks(self) -> Iterator[Dict[str, Any]]:
        """Each check's JSON as the report holds it, read one at a time."""
        for row, full in zip(self.rows, self._full):
            if isinstance(full, CheckResult):
                yield full.to_json()
                continue
            try:
                yield json.loads(full.read_text())
            except (OSError, ValueError) as e:  # removed under the session: its row, said
                lost = row.to_json()
                lost["problems"] = [f"the full result was lost ({full}: "
                                    f"{type(e).__name__}); this is its summary row"]
                yield lost
