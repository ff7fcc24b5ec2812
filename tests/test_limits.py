"""A phase's time limit (issue 38): without --compile-cache-timeout, a hung warm phase
ends in minutes (4x the cold phase's seconds, at least 300 s), not after the cold
compile's 1800 s; its message says whose limit it hit and how to change it. The real
hang, killed with its process group and its stack shown, is test_plugin.py's and
test_session_ends.py's (with the option given)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from pytest_compilecache.controller.limits import PhaseLimit
from pytest_compilecache.controller.outcome import phase_outcome
from pytest_compilecache.isolation import CacheRoot


def test_the_first_phase_gets_the_default_and_later_ones_a_multiple_of_it() -> None:
    assert PhaseLimit.of(None, "cold", "cold", None).seconds == 1800
    assert PhaseLimit.of(None, "cold", "warm", 20.0).seconds == 300   # the floor
    assert PhaseLimit.of(None, "cold", "warm", 120.0).seconds == 480  # 4x
    assert PhaseLimit.of(None, "cold", "warm", 1000.0).seconds == 1800  # never above the default
    assert PhaseLimit.of(None, "cold", "warm", None).seconds == 1800  # the first left no time
    # a phase that compiles from scratch or runs other code (deploy's, a fresh compile)
    assert PhaseLimit.of(None, "cold", "fresh", 20.0, warm_start=False).seconds == 1800
    given = PhaseLimit.of(25.0, "cold", "warm", 120.0)
    assert given.seconds == 25 and given.said == "raise --compile-cache-timeout"


def test_only_a_phase_that_starts_from_the_first_ones_caches_starts_warm() -> None:
    from pytest_compilecache import paths

    reg = paths.builtin()
    warm = {name: [p.name for p in cls.phases if p.starts_warm] for name, cls in reg.items()}
    # the first phase is the first's own limit; the reseeded restart starts from the
    # warm root and compiles at most what the cold phase did (a drawn constant's graphs)
    assert warm["local"] == ["cold", "warm", "reseeded"]
    assert warm["mega"] == ["cold", "warm"]   # loads the artifact the cold one saved
    assert "fresh" not in warm["deploy"] and "cold" not in warm["deploy"]
    assert "fresh" not in warm["other_gpu"] and "shared" not in warm["shared"]


def test_a_timed_out_later_phase_says_whose_limit_it_hit(tmp_path: Path) -> None:
    root = CacheRoot.create("t.py::test_a", str(tmp_path))
    launched = SimpleNamespace(wall_s=300.2, peak_rss_mb=None, waited_s=0.0, timed_out=True,
                               returncode=None, stages=lambda marks: {},
                               tail=lambda: "Thread 0x1 (most recent call first):\n  sleep")
    limit = PhaseLimit.of(None, "cold", "warm", 31.0)
    rec, failed = phase_outcome("t.py::test_a", "warm", root, root.phases / "warm.json",
                                launched, {}, limit, [])
    assert failed is not None and failed.verdict == "error"
    assert failed.error.startswith(
        "warm phase timed out after 300 s and was killed with its process group (the default "
        "after the cold phase: 4x its 31 s, at least 300 s; --compile-cache-timeout=S sets "
        "every phase's)"), failed.error
    assert "most recent call first" in failed.error
