"""The Action's self-test workflow (.github/workflows/action-selftest.yml) under act,
offline (.ci/act.sh): the examples' expected pass and expected failure in one session
with `fail-on: never`, then .ci/selftest_assert.sh on the step's outputs, the summary
rows and the annotation. In the slow lane, beside the other real sessions (it ran alone
before the fast lane, a minute of CI's time on a 2-core machine)."""
from __future__ import annotations

import pytest

from conftest import run_under_act

pytestmark = pytest.mark.slow


def test_the_action_reports_the_examples_pass_and_failure_with_their_annotation() -> None:
    out = run_under_act("act.sh", timeout=900)
    assert "action self-test: outputs, summaries and annotation as expected" in out, out[-6000:]
    assert "Job succeeded" in out, out[-6000:]
