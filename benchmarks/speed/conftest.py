"""SPEED_PROFILE=DIR: every process of a speed-benchmark session (the controller and each
phase) writes a cProfile of itself to DIR/<controller|phase>-<pid>.prof as it exits
(atexit: the phase's lean exit runs those too), to find where setup and record go;
`run.py --profile` sets it.
Benchmark tooling only; the plugin knows nothing of it."""
import atexit
import cProfile
import os


def pytest_configure(config):
    where = os.environ.get("SPEED_PROFILE")
    if not where:
        return
    from pytest_compilecache.isolation import CHILD_SPEC_ENV

    prof = cProfile.Profile()
    prof.enable()
    kind = "phase" if os.environ.get(CHILD_SPEC_ENV) else "controller"
    name = os.path.join(where, f"{kind}-{os.getpid()}.prof")
    atexit.register(lambda: (prof.disable(), prof.dump_stats(name)))
