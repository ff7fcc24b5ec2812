"""The package's sides, as its imports show them (issue 39): code that runs in a phase
process (child/, launch/) imports nothing of the controller's, the controller's rules
(controller/, judge/) nothing of the child's, options.py nothing of the controller's it
configures, and what both sides share sits below both (terms.py, proc.py, gpulist.py,
model.py, isolation.py). Every import counts, those inside functions too."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Set

import pytest

import pytest_compilecache

PACKAGE = Path(pytest_compilecache.__file__).parent
CONTROLLER = {"controller", "judge", "history", "render", "options", "settings", "cli", "action",
              "plugin"}
CHILD = {"child", "launch"}
SHARED = {"terms", "proc", "gpulist", "model", "wire", "isolation", "lifetime", "case", "wirejson",
          "pathoption", "jsonfile", "files"}


def _imports() -> Dict[str, Set[str]]:
    """module path ('child/workload') -> the package's top-level parts it imports."""
    out: Dict[str, Set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        parts: Set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                dotted = name.split(".")
                if dotted[0] != "pytest_compilecache":
                    continue
                if len(dotted) > 1:
                    parts.add(dotted[1])
                elif isinstance(node, ast.ImportFrom):  # from pytest_compilecache import x
                    parts.update(a.name for a in node.names)
        out[path.relative_to(PACKAGE).with_suffix("").as_posix()] = parts
    return out


@pytest.mark.parametrize("side, never", [
    (CHILD, CONTROLLER), ({"controller", "judge"}, {"child"}), ({"judge"}, {"launch"}),
    ({"options"}, CHILD | {"controller", "judge"}),
    (SHARED, CHILD | CONTROLLER | {"paths", "layers"}),
], ids=["child", "controller", "judge", "options", "shared"])
def test_each_side_imports_nothing_of_the_other(side: Set[str], never: Set[str]) -> None:
    found = sorted(f"{module} imports {', '.join(sorted(parts & never))}"
                   for module, parts in _imports().items()
                   if module.split("/")[0] in side and parts & never)
    assert found == []
