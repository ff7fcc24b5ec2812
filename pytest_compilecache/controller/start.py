"""The session's start in this process: the controller checks up front what the session
will need (where it writes, what each warm-start path needs from outside) and makes the
directories its checks and workers share; an xdist worker is handed them."""
from __future__ import annotations

import os

import pytest

from pytest_compilecache import adopted, paths, scenarios
from pytest_compilecache.controller.ledger import Ledger
from pytest_compilecache.controller.role import Role
from pytest_compilecache.controller.session import PCH_DIR_ENV, CompileCacheSession
from pytest_compilecache.controller.spool import Spool
from pytest_compilecache.launch.launcher import Launcher, SubprocessLauncher
from pytest_compilecache.launch.preloaded import PreloadedLauncher
from pytest_compilecache.launch.state import LauncherState
from pytest_compilecache.settings import Settings


def start_session(config: pytest.Config, settings: Settings) -> CompileCacheSession:
    """The session of this process, with its directories: the controller makes them
    (after the up-front checks, a usage error naming what is wrong), an xdist worker is
    handed them."""
    from pytest_compilecache import lifetime

    from pytest_compilecache.controller import early

    launcher = early.take(config, launcher_for(config, settings))
    session = CompileCacheSession(config, settings, launcher)
    lifetime.interrupt_on_sigterm(forward=session.role is not Role.WORKER)
    try:
        return _open_dirs(session, config, settings)
    except adopted.UnsafeDir as e:  # before any phase wrote there: the environment's fault
        raise pytest.UsageError(str(e)) from None


def launcher_for(config: pytest.Config, settings: Settings) -> Launcher:
    """How this session starts its phases (`--compile-cache-launcher`); the preloaded
    interpreters' state is kept per selection: the command's paths (from where it was
    run: `tests/x.py` and `./tests/x.py` are one), -k and -m."""
    if settings.launcher != "preloaded":
        return SubprocessLauncher()
    here = str(config.invocation_params.dir)
    paths = [os.path.normpath(os.path.join(here, str(a))) for a in config.args]
    selection = [*paths, f"-k {config.option.keyword or ''}",
                 f"-m {config.option.markexpr or ''}"]
    return PreloadedLauncher(LauncherState.chosen(settings.launcher_state,
                                                  str(config.rootpath), selection))


def _open_dirs(session: CompileCacheSession, config: pytest.Config,
               settings: Settings) -> CompileCacheSession:
    from pytest_compilecache import lifetime
    from pytest_compilecache.controller.gpus import LOCK_DIR_ENV, session_lock_dir
    from pytest_compilecache.controller.ledger import open_results_dir

    if session.role is Role.WORKER:  # an xdist worker ends with its controller, and
        lifetime.parent_death_signal()  # inherits its dirs
        session.adopt_dirs(getattr(config, "workerinput", {}))
        return session
    switched = scenarios.switched_on(settings, session.scenarios)
    used = [PCH_DIR_ENV, *([] if settings.lock_dir else [LOCK_DIR_ENV]),
            *(var for s in switched for var in s.inherited_env())]
    for var in used:
        adopted.from_env(var)  # refused before this session makes a directory of its own
    from pytest_compilecache.controller import preflight

    found = preflight.problems(settings.report, session.store_path, settings.store,
                               settings.root)
    found += paths.preflight(session.warm_start_paths)  # each path's own needs
    if found:
        raise pytest.UsageError("\n".join(found))
    if settings.shard_times:  # a bad report is a usage error here, not in xdist's node setup
        session.check_times()
    from pytest_compilecache.controller import early

    if early.watchdog(config) is None:  # else started before the early interpreters
        watchdog = lifetime.Watchdog.start()  # before any process of the session starts
        if watchdog is not None:
            config.add_cleanup(watchdog.stop)
    from pytest_compilecache.leftovers import report_what_workers_make, set_aside

    config.add_cleanup(report_what_workers_make())

    session.report_aside = set_aside(settings.report)  # a killed session leaves none
    fresh = not settings.lock_dir and not os.environ.get(LOCK_DIR_ENV)
    try:
        path = session_lock_dir(settings.lock_dir)
    except adopted.UnsafeDir:
        raise
    except OSError as e:
        raise pytest.UsageError(f"--compile-cache-lock-dir={settings.lock_dir}: {e}") from None
    session.owned_lock_dir = path if fresh else None
    session.lock_path = path
    session.open_pch_dir()
    for scenario in switched:  # what each scenario's checks share
        scenario.open(session)
    if session.role is Role.XDIST_CONTROLLER:  # its workers have no terminal
        from pytest_compilecache.controller.watch import WorkerWatch

        config.pluginmanager.register(WorkerWatch(config, path), "compilecache-workers")
    session.ledger = Ledger(open_results_dir())
    session.spool = Spool(session.ledger.results_dir)
    return session
