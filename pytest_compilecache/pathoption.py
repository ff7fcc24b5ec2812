"""An option a warm-start path brings with it (`WarmStartPath.options`): declared by the
path, registered by the plugin (a built-in path) or when the conftest that returns the
path loads, read into `Settings.path_options`. Below both the options and the paths."""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Callable, Optional


@dataclass(frozen=True)
class PathOption:
    """An option a warm-start path adds (`WarmStartPath.options`):
    `--compile-cache-<name>=METAVAR` and its ini twin `compile_cache_<name>`; the path's
    `from_settings` reads its value with `settings.path_option(name)`."""
    name: str
    help: str
    metavar: str = "VALUE"
    parse: Callable[[str], Any] = str

    @property
    def dest(self) -> str:
        return "compile_cache_" + self.name.replace("-", "_")

    def add(self, addoption: Callable[..., Any], addini: Optional[Callable[..., Any]]) -> None:
        addoption(f"--compile-cache-{self.name}", dest=self.dest, default=None,
                  type=self.parse, metavar=self.metavar, help=self.help)
        if addini is not None:
            addini(self.dest, help=self.help, type="string", default=None)

    def read(self, config: Any) -> Any:
        """The option's value: the command line's, else its ini twin's, else None."""
        value = config.getoption(self.dest, None)
        if value is None:
            try:
                raw = config.getini(self.dest)
            except (KeyError, ValueError):  # not registered in this config
                return None
            if raw not in (None, "", []):  # pytest < 8 reads an unset string ini as []
                try:
                    value = self.parse(str(raw))
                except (argparse.ArgumentTypeError, ValueError) as e:
                    raise ValueError(f"ini option {self.dest}: {e}") from None
        return value
