"""The pytest item that stands in for a marked test under --compile-cache-check, and how
its failure reads (the check's report, its first reason as pytest's crash message,
JUnit properties). The check itself runs in `check.CheckRun`."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Protocol, Tuple

import pytest

from pytest_compilecache.model import OK_VERDICTS, CheckResult
from pytest_compilecache.render import lines as tx


class RunsChecks(Protocol):
    """What an item needs of the session (controller/session.py)."""

    def run_check(self, item: "CheckItem") -> List[CheckResult]: ...


class CheckFailed(Exception):
    def __init__(self, results: List[CheckResult]) -> None:
        super().__init__(results[0].nodeid)
        self.results = results


class _Crash:
    """Where pytest reads a failure's one-line message (`--tb=line` prints it whole)."""

    def __init__(self, message: str) -> None:
        self.message, self.path, self.lineno = message, None, None

    def __str__(self) -> str:
        return self.message


class CheckFailureRepr:
    """A failed check's report, with its first reason where pytest looks for a crash
    message: the short test summary (-rA) and JUnit's failure message show it."""

    def __init__(self, text: str, reason: str) -> None:
        self.text = text
        self.reprcrash = _Crash(reason)

    def toterminal(self, tw: Any) -> None:
        for line in self.text.splitlines():
            tw.line(line)

    def __str__(self) -> str:
        return self.text


class CheckItem(pytest.Item):
    """Stands in for a marked test under --compile-cache-check: same node id and
    markers, but no fixtures are set up here; the phases run in child processes."""

    def __init__(self, *, original: pytest.Function, check_session: RunsChecks,
                 **kw: Any) -> None:
        super().__init__(**kw)
        self._location_info = original.reportinfo()
        self._path = original.path
        self.check_session = check_session
        self.own_markers = list(original.own_markers)
        self.keywords.update(original.keywords)
        spec = getattr(original, "callspec", None)  # a parametrized test's parameter set
        self.params_id: str = getattr(spec, "id", "") if spec is not None else ""
        self.params: Dict[str, str] = {
            name: _shown(value) for name, value in (getattr(spec, "params", None) or {}).items()}

    def runtest(self) -> None:
        results = self.check_session.run_check(self)  # not kept: the session spools them
        for r in results:  # --junitxml shows them
            self.user_properties.extend(junit_properties(r))
        failed = [r for r in results if r.verdict not in OK_VERDICTS]
        if failed:
            raise CheckFailed(failed)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, CheckFailed):
            results = excinfo.value.results
            return CheckFailureRepr(
                "\n\n".join("\n".join(tx.failure_lines(r)) for r in results),
                tx.first_reason(results[0]))
        return super().repr_failure(excinfo)

    def reportinfo(self) -> Tuple[Any, Optional[int], str]:
        return self._location_info


def _shown(value: Any) -> str:
    """A parameter's value as the report names it (what tells two variants apart)."""
    try:
        text = repr(value)
    except Exception as e:  # a parameter whose repr raises
        text = f"<{type(value).__name__}: repr failed: {type(e).__name__}>"
    return text if len(text) <= 120 else text[:117] + "..."


def junit_properties(r: CheckResult) -> List[Tuple[str, str]]:
    """A check's verdict, layer states and timings as JUnit testcase properties."""
    p = "compile_cache." + ("" if r.via == "local" else f"{r.via}.")
    props = [(f"{p}verdict", r.verdict)]
    props += [(f"{p}{name}", lv.state) for name, lv in r.layers.items()]
    props += [(f"{p}{k}", f"{v:.3f}") for k, v in sorted(r.timings.items())
              if k in ("cold_s", "warm_s", "cold_process_s", "warm_process_s") and v is not None]
    if r.drift.get("status"):
        props.append((f"{p}drift", str(r.drift["status"])))
    return props
