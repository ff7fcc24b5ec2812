"""Variants over one cache (--compile-cache-share-variants): the `shared` path in the
local restart's place."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Tuple

from pytest_compilecache.scenarios.base import FOR_LOCAL, Scenario


class ShareVariants(Scenario):
    name = "shared"
    switch = "share-variants"
    stands_in = FOR_LOCAL
    def inherited_env(self) -> Tuple[str, ...]:
        from pytest_compilecache.controller.variants import SHARED_DIR_ENV

        return (SHARED_DIR_ENV,)

    def open(self, session: Any) -> None:
        """The parent of the variants' shared roots, unless a parent session's was
        handed down (controller/variants.py)."""
        from pytest_compilecache import adopted
        from pytest_compilecache.controller import variants

        if not adopted.from_env(variants.SHARED_DIR_ENV):
            session.owned_shared_dir = variants.open_parent(session.settings.root)
            session.shared_path = str(session.owned_shared_dir)

    def close(self, session: Any) -> None:
        import os

        from pytest_compilecache.controller.variants import SHARED_DIR_ENV
        from pytest_compilecache.leftovers import remove_owned

        if session.owned_shared_dir is None:  # a parent session's, or none was needed
            return
        failed = any(r.via == "shared" and r.verdict not in ("pass", "n/a", "recorded")
                     for r in session.results)
        if not (failed or session.settings.keep):
            remove_owned(session.owned_shared_dir)
        os.environ.pop(SHARED_DIR_ENV, None)

    help = ("also run the variants of each test function (its parametrized "
            "instances) over one cache they share, one after another, as a service "
            "serving them all from one cache dir; fail when a variant loads an "
            "entry another wrote and computes other numbers (a false hit)")

    def usage_error(self, on: Mapping[str, Any], values: Mapping[str, Any]) -> Optional[str]:
        if "other_gpu" in on:
            return ("--compile-cache-share-variants and --compile-cache-warm-on-other-gpu "
                    "each stand in for the local restart: run them in separate sessions")
        if "deploy" in on:
            return ("--compile-cache-share-variants needs the warm-start check; drop "
                    "--compile-cache-baseline-warm (the deploy scenario compares commits: "
                    "run it in a session of its own)")
        for name, switch in (("keys", "keys-only"), ("record", "manifest-only")):
            if name in on:
                return ("--compile-cache-share-variants needs the warm-start check; drop "
                        f"--compile-cache-{switch}")
        return None
