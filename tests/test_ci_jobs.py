"""CI's order and its two jobs (tests/conftest.py) name modules that exist: a renamed
module would otherwise leave the longest-first order, or move to the first job, unseen."""
from pathlib import Path

from conftest import LONGEST_FIRST, SECOND_JOB

HERE = Path(__file__).parent


def test_the_ci_order_and_the_second_job_name_existing_modules() -> None:
    missing = sorted(n for n in {*LONGEST_FIRST, *SECOND_JOB} if not (HERE / n).is_file())
    assert not missing, f"no such test module: {missing}"


def test_the_second_job_is_part_of_the_slow_lane_order() -> None:
    assert SECOND_JOB <= set(LONGEST_FIRST)
