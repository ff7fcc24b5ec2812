"""The preloaded interpreters started before pytest loads the initial conftests.

A model repo's conftest usually imports torch. The interpreters used to start at
`sessionstart`, after it had: on this project's 2-core machine a conftest importing
torch moved their start to 2.7-3.5 s (0.4-0.5 s here), and the first phase waited the
longer for their imports (torch, then its compile stack). Here they start as the conftests
begin to load, from what the command line and the ini say (pytest has parsed its
options by then, not the conftests' own). The session takes them at configure where it
would have made the same launcher (`take`), else they are closed; at sessionstart they
keep running where the session's environment is the one they started with, but for
the plugin's own variables, and the process hands its children what it did then
(`PreloadedLauncher.start`, `process_state`), else they start again.
"""
from __future__ import annotations

import atexit
import os
import types
from typing import Any, Optional

import pytest

from pytest_compilecache.isolation import CHILD_SPEC_ENV

_EARLY = pytest.StashKey[Any]()


# what only prints or only collects: no phase runs
_NO_PHASES = ("collectonly", "help", "version", "markers", "showfixtures",
              "show_fixtures_per_test", "cacheshow")


def start(early_config: pytest.Config) -> None:
    """Start them where this process will run phases, if anything is unclear not at
    all: configure then reads the options again and says what is wrong. The session's
    watchdog first (a controller's; a worker's processes carry its controller's mark):
    what it finds by its mark must include them (lifetime.Watchdog)."""
    ns = early_config.known_args_namespace
    worker = _is_worker(early_config.invocation_params.args)
    if not _runs_phases(ns, worker):
        return
    try:
        launcher, threads = _launcher(early_config, ns)
    except Exception:
        return
    if launcher is None:
        return
    from pytest_compilecache import lifetime

    watchdog = None if worker else lifetime.Watchdog.start()  # its mark: os.environ

    def close() -> None:
        atexit.unregister(close)
        launcher.close()
        if watchdog is not None:
            watchdog.stop()

    early_config.add_cleanup(close)  # a usage error at configure, or the session's end
    atexit.register(close)  # a conftest that fails to import: no cleanup runs
    early_config.stash[_EARLY] = (launcher, watchdog)
    launcher.start(_env(threads), str(early_config.invocation_params.dir))


def take(config: pytest.Config, launcher: Any) -> Any:
    """The launcher the session made (`launcher`), or in its place the one started
    early where this process runs phases and keeps its state where that one does; the
    other is closed."""
    from pytest_compilecache.controller.role import role_of

    early, _ = config.stash.get(_EARLY, (None, None))
    if early is None:
        return launcher
    same = (type(early) is type(launcher) and _list_path(early) == _list_path(launcher)
            and role_of(config).runs_phases)
    (launcher if same else early).close()
    return early if same else launcher


def watchdog(config: pytest.Config) -> Optional[Any]:
    """The watchdog started before the early interpreters (stopped at the config's
    cleanup), if any."""
    return config.stash.get(_EARLY, (None, None))[1]


def _runs_phases(ns: Any, worker: bool) -> bool:
    """A check session's controller or xdist worker, not a phase, not an xdist
    controller, nor a run that only collects or only prints."""
    if os.environ.get(CHILD_SPEC_ENV) or not getattr(ns, "compile_cache_check", False):
        return False
    if getattr(ns, "numprocesses", None) and not worker:
        return False
    return not any(getattr(ns, name, False) for name in _NO_PHASES)


def _is_worker(args: Any) -> bool:
    """An xdist worker: with its worker id (which an xdist controller run by a worker's
    test inherits too), and not pytest's command (it is execnet's interpreter)."""
    from pytest_compilecache.controller.exit import pytest_is_the_program

    return bool(os.environ.get("PYTEST_XDIST_WORKER")) and not pytest_is_the_program(args)


def _launcher(early_config: pytest.Config, ns: Any) -> Any:
    """The launcher `start_session` would make, from the options as parsed so far, and
    the thread count each phase gets."""
    from pytest_compilecache import paths
    from pytest_compilecache.controller.start import launcher_for
    from pytest_compilecache.settings import Settings

    view = _ConfigView(early_config, ns)
    settings = Settings.from_config(view)
    if not settings.check or settings.launcher != "preloaded":
        return None, 0
    launcher: Any = launcher_for(view, settings)  # type: ignore[arg-type]
    if paths.one_phase_each(paths.for_settings(settings, paths.registry())):
        launcher.narrow(1)  # a recording (sessionstart narrows the same)
    return launcher, settings.threads


def _env(threads: int) -> Any:
    """The environment sessionstart starts the interpreters with."""
    from pytest_compilecache.isolation import phase_env

    placeholder = types.SimpleNamespace(inductor=os.devnull, triton=os.devnull,
                                        tmp=os.devnull)
    return phase_env(os.environ, placeholder, threads, os.devnull)  # type: ignore[arg-type]


class _ConfigView:
    """What Settings and launcher_for read of a config, before pytest has set its
    options: the known arguments, the ini, the args as pytest will decide them."""

    def __init__(self, config: pytest.Config, ns: Any) -> None:
        self._config, self.option = config, ns
        self.invocation_params, self.rootpath = config.invocation_params, config.rootpath
        self.args = _args(config, ns)

    def getoption(self, name: str, default: Any = None) -> Any:
        return getattr(self.option, name, default)

    def getini(self, name: str) -> Any:
        return self._config.getini(name)


def _args(config: pytest.Config, ns: Any) -> Any:
    """config.args to be: pytest's own choice where this pytest has it, else the
    paths given or the invocation dir."""
    decide = getattr(config, "_decide_args", None)
    if decide is not None:
        args, _ = decide(args=ns.file_or_dir, pyargs=ns.pyargs,
                         testpaths=config.getini("testpaths"),
                         invocation_dir=config.invocation_params.dir,
                         rootpath=config.rootpath, warn=False)
        return args
    return ns.file_or_dir or [str(config.invocation_params.dir)]


def _list_path(launcher: Any) -> Optional[Any]:
    """Where it keeps its preload list: its rootdir and selection (None: kept nowhere)."""
    state = getattr(launcher, "state", None)
    return getattr(state, "list_path", None)
