"""Cut the per-rank phase records of a multi-rank session's kept cache roots into
tests/data/ranks/<check>.json, for tests/test_ranks_rules.py (README.md says how); a
replicated session's into tests/data/replicas (DIR), for tests/test_replicas_rules.py.

    python tests/data/ranks/record.py REPORT.json [DIR]

REPORT.json: the session's --compile-cache-report, run with --compile-cache-keep (every
check's root kept; the `private` roots are named in each check's notes).
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, Dict

HERE = Path(__file__).resolve().parent
# what the rank rules read of an entry's key components: the extension points (the
# false hit's "what the key holds") and two that every entry has; the rest are cut
KEPT = re.compile(r"post_grad_custom|pre_grad_custom|joint_custom|grad_enabled|^gm$")
FIELDS = ("phase", "nodeid", "ran", "error", "device", "form", "versions", "outputs",
          "compare_cold", "compare_eager", "rank")


def cut(rec: Dict[str, Any]) -> Dict[str, Any]:
    out = {k: rec[k] for k in FIELDS if k in rec}
    graphs = {}
    for gid, g in ((rec.get("cache") or {}).get("graphs") or {}).items():
        graphs[gid] = {layer: [{**e, "components": [
            [c[0], c[1], str(c[2])[:60]] for c in e.get("components") or []
            if KEPT.search(str(c[0]))]} for e in g.get(layer) or []]
            for layer in ("fx_graph", "aot_autograd")}
    out["cache"] = {"graphs": graphs}
    return out


def main(report: str, into: Path = HERE) -> None:
    data = json.loads(Path(report).read_text())
    for check in data["checks"]:
        if not check.get("ranks"):  # a phase that failed: no rank was judged
            continue
        name = check["nodeid"].split("::")[-1]
        roots = [Path(check["cache_root"])] + [
            Path(p) for n in check["notes"] if n.startswith("the empty roots")
            for p in n.split(": ", 1)[1].split(", ")]
        recs = {f.stem: cut(json.loads(f.read_text())) for root in roots
                for f in sorted((root / "phases").glob("*.r[0-9].json"))}
        expected = {k: check[k] for k in ("verdict", "problems", "notes")}
        expected["ranks"] = [{k: r[k] for k in ("rank", "verdict", "loaded_from_other_ranks")}
                             for r in check["ranks"]]
        out = into / f"{name}.json"
        out.write_text(json.dumps({"nodeid": check["nodeid"], "recs": recs,
                                   "expected": expected}, indent=1) + "\n")
        print(out, out.stat().st_size)


if __name__ == "__main__":
    main(sys.argv[1], *(Path(p) for p in sys.argv[2:3]))
