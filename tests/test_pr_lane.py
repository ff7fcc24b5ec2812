"""The PR lane of docs/github-action.md under act, offline (.ci/pr_lane.sh): main's push
keeps its compile caches; a README PR deploys warm over them with every layer hit; an
Inductor config PR is red, named by the keys-only drift with the command that accepts
it, then green in the deploy (run with CI=true) with that command's
compilecache-accepted.json (recorded with CI unset) committed; an accepted model change
over a stale cache entry (a custom op's backward in no key) stays red; no PR run saves
anything. The script's assertions are
.ci/pr_lane_assert.sh's (per run: outputs, job summary, annotations, report) and its own."""
from __future__ import annotations

import pytest

from conftest import run_under_act

pytestmark = pytest.mark.slow


def test_the_pr_lane_accepts_a_config_flip_in_the_repo_and_stays_red_on_a_stale_entry() -> None:
    out = run_under_act("pr_lane.sh", timeout=2400)
    for expect in ("main", "same", "config", "accepted", "stale"):
        assert f"pr-lane self-test ({expect}): as expected" in out, out[-6000:]
    assert "no PR run saved anything" in out
