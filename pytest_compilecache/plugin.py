"""pytest glue: options, marker, fixture and the registration of the session
(controller) or the child plugin (inside a phase process). Nothing else."""
from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any, Dict, List

import pytest

from pytest_compilecache import lifetime
from pytest_compilecache.isolation import CHILD_SPEC_ENV
from pytest_compilecache.options import add_options, core_dests
from pytest_compilecache.pathoption import PathOption
from pytest_compilecache.settings import Settings

_SESSION = pytest.StashKey[Any]()
_FINISHED = pytest.StashKey[pytest.Session]()  # a reporting controller's, at its end
_PATH_OPTIONS = "compilecache-path-options"


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_compilecache import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    group = parser.getgroup("compilecache", "torch.compile cache checks (pytest-compilecache)")
    add_options(group.addoption, parser.addini)
    from pytest_compilecache.paths import builtin_options

    pluginmanager.register(PathOptions(group.addoption, parser.addini, builtin_options()),
                           _PATH_OPTIONS)


class PathOptions:
    """The warm-start paths' own options: the built-in paths' at once, a conftest's or
    plugin's paths' when it registers (before the command line is parsed, as a conftest's
    own pytest_addoption), so that `--compile-cache-<name>` of a path is an option like
    any other."""

    def __init__(self, addoption: Any, addini: Any, builtin: Any) -> None:
        self.addoption, self.addini = addoption, addini
        self.added: Dict[str, PathOption] = {}
        self.problems: List[str] = []  # said as a usage error once the session configures
        self.core = core_dests()
        for option in builtin:
            self._add(option)

    def _add(self, option: PathOption, owner: str = "a built-in path") -> None:
        if option.name in self.added:
            if self.added[option.name] != option:  # two paths, one name: the first keeps it
                self.problems.append(f"--compile-cache-{option.name}: {owner} declares it, "
                                     f"and another path already did; give it a name of its own")
            return
        if option.dest in self.core:
            self.problems.append(f"--compile-cache-{option.name}: {owner} declares an option "
                                 f"of pytest-compilecache's own; give it a name of its own")
            return
        option.add(self.addoption, self.addini)
        self.added[option.name] = option

    @pytest.hookimpl
    def pytest_plugin_registered(self, plugin: Any) -> None:
        self._add_switches(plugin)
        hook = getattr(plugin, "pytest_compilecache_warm_start_paths", None)
        if plugin is self or not callable(hook):
            return
        try:
            found = list(hook() or ())
        except Exception as e:  # said when the session configures (`values`)
            self.problems.append(f"pytest_compilecache_warm_start_paths in {plugin!r} raised "
                                 f"{type(e).__name__}: {e} (its paths' options are unknown)")
            return
        for cls in found:
            for option in getattr(cls, "options", ()) or ():
                if isinstance(option, PathOption):
                    self._add(option, f"{getattr(cls, '__module__', '?')}."
                                      f"{getattr(cls, '__qualname__', cls)}")

    def _add_switches(self, plugin: Any) -> None:
        """A conftest's scenarios' switches (the built-in ones are options.py's)."""
        from pytest_compilecache.options import add_switch
        from pytest_compilecache.scenarios import builtin, from_hook

        hook = getattr(plugin, "pytest_compilecache_scenarios", None)
        if plugin is self or not callable(hook):
            return
        reg = builtin()
        known = set(reg)
        try:
            from_hook(hook(), reg, f"pytest_compilecache_scenarios in {plugin!r}")
        except Exception as e:  # said when the session configures (`values`)
            self.problems.append(f"{e} (its scenarios' switches are unknown)")
            return
        for name in set(reg) - known:
            add_switch(reg[name], self.addoption, self.addini)

    def values(self, config: pytest.Config) -> Any:
        """(name, value) of each path option given, on the command line or in the ini."""
        out = []
        for name, option in self.added.items():
            try:
                value = option.read(config)
            except ValueError as e:
                raise pytest.UsageError(str(e)) from None
            if value is not None:
                out.append((name, value))
        return tuple(out)


@pytest.hookimpl
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """The preloaded interpreters start before a conftest imports torch: pytest loads
    them last (trylast), and a plugin that sets the environment here (pytest-env) does
    so first (tryfirst)."""
    if getattr(early_config.known_args_namespace, "compile_cache_check", False):
        from pytest_compilecache.controller import early

        early.start(early_config)


@pytest.hookimpl
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "compile_cache(**compile_kwargs): a torch.compile cache check; with "
        "--compile-cache-check it is compiled cold then warm in fresh processes and fails "
        "when a cache layer misses. Keyword arguments go to torch.compile.")
    config.addinivalue_line(
        "markers",
        "compile_cache_accept(*layers, reason=None): the compile-cache check accepts these "
        "layers' miss as a known warm-start cost (e.g. 'dynamo_pgo'); shown as accepted.")
    spec_path = os.environ.pop(CHILD_SPEC_ENV, None)  # not for the test's own subprocesses
    if spec_path:
        _register_phase_child(config, spec_path)
        return
    from pytest_compilecache import scenarios

    try:
        settings = Settings.from_config(config, scenarios.registry(config.pluginmanager))
    except (ValueError, argparse.ArgumentTypeError) as e:
        raise pytest.UsageError(str(e)) from None
    registrar = config.pluginmanager.get_plugin(_PATH_OPTIONS)
    if registrar is not None:
        settings = dataclasses.replace(settings, path_options=registrar.values(config))
    if registrar is not None and registrar.problems and (settings.check
                                                         or settings.via != ("local",)):
        raise pytest.UsageError("\n".join(registrar.problems))
    if settings.check or settings.via != ("local",):
        _check_paths(config, settings.via)
    if not settings.check:
        return
    if settings.baseline:
        _check_baseline(config, settings.baseline)
    from pytest_compilecache.controller.start import start_session

    session = start_session(config, settings)
    config.stash[_SESSION] = session
    config.pluginmanager.register(session, "compilecache-session")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    owner = session.config.stash.get(_SESSION, None)
    if getattr(getattr(owner, "role", None), "reports", False):
        session.config.stash[_FINISHED] = session


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """A controller that reported ends without the teardown of its test modules'
    imports (controller/exit.py), with the session's exit status."""
    session = config.stash.get(_FINISHED, None)
    if session is None:
        return
    from pytest_compilecache.controller import exit as ending

    if ending.pytest_is_the_program(config.invocation_params.args):
        ending.end_at_exit(lambda: int(session.exitstatus))


@pytest.hookimpl
def pytest_report_header(config: pytest.Config) -> Any:
    """The slots the session's checks share and what xdist's workers do with them (a
    worker waiting for a slot is then expected, not a hang)."""
    session = config.stash.get(_SESSION, None)
    if session is None or not getattr(session, "role", None) or not session.role.reports:
        return None
    from pytest_compilecache.controller.gpus import slots_header

    return slots_header(session.settings, int(config.getoption("numprocesses", 0) or 0))


def _register_phase_child(config: pytest.Config, spec_path: str) -> None:
    """In a phase process: the child's plugin, with its side of the check's path."""
    from pytest_compilecache import paths
    from pytest_compilecache.child.body import BodyHooks
    from pytest_compilecache.child.case import CaseHooks
    from pytest_compilecache.child.phase import ChildPlugin, load_spec

    spec = load_spec(spec_path)
    path_cls = paths.registry(config.pluginmanager)[spec.get("path") or "local"]
    forked_by = os.environ.pop(lifetime.LAUNCHER_PID_ENV, None)
    lifetime.die_with_launcher(int(forked_by) if forked_by else spec.get("launcher_pid"))
    child = ChildPlugin(spec, path_cls())
    child.configure()
    if spec.get("rank") is not None:  # one rank of a multi-rank check: its process group
        from pytest_compilecache.child import ranks

        ranks.start(config, child.result, spec, child.device)
    config.stash[_SESSION] = child
    config.pluginmanager.register(child, "compilecache-child")
    config.pluginmanager.register(CaseHooks(child), "compilecache-child-case")
    config.pluginmanager.register(BodyHooks(child), "compilecache-child-body")


def _check_paths(config: pytest.Config, vias: Any) -> None:
    """A path nobody registered, or a hook's path that is no path, is a usage error."""
    from pytest_compilecache import paths

    try:
        unknown = paths.unknown_via(vias, paths.registry(config.pluginmanager))
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None
    if unknown:
        raise pytest.UsageError(unknown)


def _check_baseline(config: pytest.Config, rev: str) -> None:
    """A wrong REF is a usage error up front, not one error per check."""
    from pytest_compilecache.history import git as history

    try:
        history.resolve(history.require_root(config.rootpath), rev)
    except history.GitError as e:
        raise pytest.UsageError(f"--compile-cache-baseline={rev}: {e}") from None


@pytest.fixture
def compile_cache(request: pytest.FixtureRequest) -> Any:
    """The check's context: ``.device`` to compile for, ``.phase`` ("cold"/"warm", None
    outside a check) and ``.record(name, value)`` to compare extra values."""
    owner = request.config.stash.get(_SESSION, None)
    if owner is not None and hasattr(owner, "context"):
        return owner.context()
    from pytest_compilecache.child.workload import CheckContext

    return CheckContext()
