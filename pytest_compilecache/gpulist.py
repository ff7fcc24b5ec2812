"""The --compile-cache-gpus value: `auto`, or a comma list of device ids. Pure: options.py
checks it, the controller's device slots (controller/gpus.py) read it.
"""
from __future__ import annotations

from typing import List, Optional


def parse_gpus(value: str) -> Optional[List[str]]:
    """'auto' -> None (discover), else an explicit comma list of device ids."""
    v = value.strip()
    if v in ("", "auto"):
        return None
    ids = [x.strip() for x in v.split(",") if x.strip()]
    if not ids:
        raise ValueError(f"{value!r} names no GPU; use auto or a list such as 0,1,3")
    return ids
