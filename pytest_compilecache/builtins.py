"""The classes a registry's built-in modules define (paths/, scenarios/): each module's
own subclasses of the registry's base that have a name, by name."""
from __future__ import annotations

import importlib
from typing import Any, Dict, Iterable


def subclasses_in(package: str, modules: Iterable[str], base: type) -> Dict[str, Any]:
    found: Dict[str, Any] = {}
    for module in modules:
        mod = importlib.import_module(f"{package}.{module}")
        for cls in vars(mod).values():
            name = getattr(cls, "name", "")
            if (isinstance(cls, type) and issubclass(cls, base) and name
                    and cls.__module__ == mod.__name__):
                found[str(name)] = cls
    return found
