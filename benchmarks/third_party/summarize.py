"""Print the plain pair beside the plugin's verdict for each third-party test.

    python summarize.py OUT_DIR

OUT_DIR holds what run.sh wrote: ``<suite>.plugin.json`` (the plugin's
``--compile-cache-report``), ``<suite>.plugin.wall`` and, per test, ``pair-<n>.json``
(``{"nodeid", "suite", "cold": {...}, "warm": {...}, "warm_files_written", "wall_s"}``,
cold and warm as thirdparty_counters.py wrote them).
"""

import glob
import json
import os
import re
import sys

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def pair_verdict(p):
    """What the plain pair says: pass, or fail/error with the reason."""
    cold, warm = p.get("cold") or {}, p.get("warm") or {}
    co = (cold.get("outcomes") or {}).get(p["nodeid"], "not run")
    wo = (warm.get("outcomes") or {}).get(p["nodeid"], "not run")
    ind = warm.get("inductor") or {}
    hit, miss = ind.get("fxgraph_cache_hit", 0), ind.get("fxgraph_cache_miss", 0)
    if co != "passed":
        return "error", f"cold {co}"
    if wo != "passed":
        return "fail", f"warm {wo}"
    if miss or not hit:
        return "fail", f"warm fx graph cache: {hit} hit(s), {miss} miss(es)"
    return "pass", "both passed, warm hit the FX graph cache"


def error_lines(error):
    """An error's first line, the test's own frame and the exception, not the whole traceback."""
    lines = ANSI.sub("", str(error)).splitlines()
    keep, own = lines[:1], None
    for i, line in enumerate(lines):
        if line.startswith("--- last lines"):
            break
        s = line.strip()
        library = any(k in s for k in ("site-packages", "pytest_compilecache", "pluggy"))
        if own is None and s.startswith("File ") and not library:
            own = s
        if i and re.match(r"^[A-Za-z_.]+(Error|Exception|Interrupt)\b", line):
            keep += ([f"at {own}"] if own else []) + [ln for ln in lines[i:i + 5]
                                                      if ln.strip() and not ln.startswith("---")]
            break
    return keep


def short(nodeid):
    return nodeid.split("/")[-1]


def main(out):
    reports = {}
    for path in sorted(glob.glob(os.path.join(out, "*.plugin.json"))):
        suite = os.path.basename(path).split(".")[0]
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            print(f"{path}: unreadable ({e})")
            continue
        wall = None
        wpath = os.path.join(out, f"{suite}.plugin.wall")
        if os.path.exists(wpath):
            wall = open(wpath).read().strip()
        reports[suite] = (data, wall)

    checks = {}
    for suite, (data, wall) in reports.items():
        print(f"\n=== plugin: {suite} (session wall {wall} s, exit {data.get('exitstatus')}, "
              f"plugin {data.get('plugin_version')}) ===")
        for c in data.get("checks", []):
            checks[c["nodeid"]] = c
            layers = " ".join(f"{k}={v.get('state')}" for k, v in (c.get("layers") or {}).items())
            t = c.get("timings") or {}
            print(f"- {c['nodeid']}: {c['verdict']}  [{layers}]  "
                  f"cold {t.get('cold_s')} s, warm {t.get('warm_s')} s")
            if c.get("error"):
                for line in error_lines(c["error"]):
                    print(f"    error: {line[:400]}")
            for p in (c.get("problems") or [])[:6]:
                print(f"    problem: {str(p).splitlines()[0][:400]}")
            outs = c.get("outputs") or {}
            for key in ("warm_vs_cold", "cold_vs_eager", "warm_vs_eager"):
                o = outs.get(key)
                if isinstance(o, dict) and o.get("ok") is False:
                    for m in (o.get("mismatches") or [])[:2]:
                        print(f"    {key}: {m.get('name')}: {str(m.get('message')).splitlines()[0][:300]}")

    pairs = []
    for path in sorted(glob.glob(os.path.join(out, "pair-*.json"))):
        with open(path) as f:
            pairs.append(json.load(f))
    pair_by_id = {p["nodeid"]: p for p in pairs}

    ids = list(dict.fromkeys([p["nodeid"] for p in pairs] + list(checks)))
    rows = [("test", "cold", "warm", "warm fx hit/miss", "warm files", "cold+warm s", "plain pair",
             "plugin", "same?")]
    for nid in ids:
        p, c = pair_by_id.get(nid), checks.get(nid)
        if p:
            pv, _ = pair_verdict(p)
            cold = (p["cold"].get("outcomes") or {}).get(nid, "not run")
            warm = (p["warm"].get("outcomes") or {}).get(nid, "not run")
            ind = p["warm"].get("inductor") or {}
            fx = f"{ind.get('fxgraph_cache_hit', 0)}/{ind.get('fxgraph_cache_miss', 0)}"
            files = str(p.get("warm_files_written"))
            ws = f"{p.get('cold_wall_s')}+{p.get('warm_wall_s')}"
        else:
            pv = cold = warm = fx = files = ws = "-"
        cv = c["verdict"] if c else "-"
        same = "-" if (not p or not c) else ("yes" if pv == cv else "NO")
        rows.append((short(nid), cold, warm, fx, files, ws, pv, cv, same))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    print("\n=== plain pair vs plugin ===")
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    for p in pairs:
        pv, why = pair_verdict(p)
        print(f"plain pair {short(p['nodeid'])}: {pv}: {why}")
        for path in p.get("warm_written") or []:
            print(f"    written by warm: {path}")
    bad = [r for r in rows[1:] if r[-1] == "NO"]
    print(f"\n{len(rows) - 1} test(s); plugin verdict differs from the plain pair's on {len(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
