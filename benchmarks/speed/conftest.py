"""SPEED_PROFILE=DIR: every phase process of the speed benchmark writes a cProfile of
itself to DIR/<phase>-<pid>.prof as it exits (atexit: the phase's lean exit runs those),
to find where setup and record go. Benchmark tooling only; the plugin knows nothing of it."""
import atexit
import cProfile
import os

from pytest_compilecache.isolation import CHILD_SPEC_ENV


def pytest_configure(config):
    where = os.environ.get("SPEED_PROFILE")
    if not where or not os.environ.get(CHILD_SPEC_ENV):
        return
    prof = cProfile.Profile()
    prof.enable()
    name = os.path.join(where, f"phase-{os.getpid()}.prof")
    atexit.register(lambda: (prof.disable(), prof.dump_stats(name)))
