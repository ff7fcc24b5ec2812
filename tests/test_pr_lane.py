"""The PR lane of docs/github-action.md under act, offline (.ci/pr_lane.sh): main's push
keeps its compile caches; a README PR deploys warm over them with every layer hit; an
Inductor config PR is named by the keys-only drift and by the deploy; no PR run saves
anything. The script's assertions are .ci/pr_lane_assert.sh's (per run) and its own."""
from __future__ import annotations

import pytest

from conftest import run_under_act

pytestmark = pytest.mark.slow


def test_the_pr_lane_restores_mains_caches_names_a_config_flip_and_saves_nothing() -> None:
    out = run_under_act("pr_lane.sh", timeout=1200)
    for expect in ("main", "same", "config"):
        assert f"pr-lane self-test ({expect}): as expected" in out, out[-6000:]
    assert "no PR run saved anything" in out
