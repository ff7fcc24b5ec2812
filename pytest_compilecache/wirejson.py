"""How a typed section of the phase wire (model.py) reads the JSON a child wrote:
missing keys take defaults, null sections read empty, unknown keys are skipped. Pure."""
from __future__ import annotations

import typing
from dataclasses import fields
from typing import Any, Dict, List, Optional, Type, TypeVar, Union

W = TypeVar("W", bound="Wire")


class Wire:
    """A typed section of the wire. A field whose type is a container (dict, list, a
    section) reads a missing or null value as its default; an Optional section reads a
    missing, null or empty one as None (the judges' `if not section`); a scalar keeps
    what was written, else its default. A field named `raw` gets the JSON read."""

    @classmethod
    def from_json(cls: Type[W], data: Any) -> W:
        if isinstance(data, cls):
            return data
        d: Dict[str, Any] = data if isinstance(data, dict) else {}
        hints = _hints(cls)
        kw = {f.name: _read(hints[f.name], d[f.name], f) for f in fields(cls)  # type: ignore[arg-type]
              if f.name in d and f.name != "raw"}
        obj = cls(**kw)
        if "raw" in hints:
            setattr(obj, "raw", d)
        return obj

    @classmethod
    def optional(cls: Type[W], data: Any) -> Optional[W]:
        """None for a missing, null or empty section, as the judges' `if not section`."""
        return cls.from_json(data) if isinstance(data, cls) or data else None


_HINTS: Dict[type, Dict[str, Any]] = {}


def _hints(cls: type) -> Dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _read(tp: Any, value: Any, f: Any) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Union:  # Optional[X]
        inner = next(a for a in args if a is not type(None))
        if isinstance(inner, type) and issubclass(inner, Wire):
            return inner.optional(value)
        return None if value is None else _read(inner, value, f)
    if isinstance(tp, type) and issubclass(tp, Wire):
        return tp.from_json(value) if isinstance(value, dict) else f.default_factory()
    if origin in (list, List):
        if not isinstance(value, list):
            return f.default_factory() if value is None else value
        item: Any = args[0] if args else Any
        return [item.from_json(v) for v in value] if _is_wire(item) else value
    if origin in (dict, Dict):
        if not isinstance(value, dict):
            return f.default_factory() if value is None else value
        item = args[1] if len(args) > 1 else Any
        return {k: item.from_json(v) for k, v in value.items()} if _is_wire(item) else value
    return value


def _is_wire(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, Wire)
