"""Per check of sharding reports: each phase's process seconds, split into start-up
(interpreter, pytest, import torch), setup (fixtures, model built), compile+run, eager
reference, record and exit; and the slot each phase had. Then the session around its
phases: each xdist worker's start, collection, its preloaded interpreters' imports and
end, and the first and last phase, in seconds since the controller started (the
report's `timeline`). Shows where wall time went.

    python benchmarks/sharding/timings.py $OUT/sharding-1x1.json $OUT/sharding-2x1.json
"""
import json
import sys
from datetime import datetime

STAGES = ("startup", "setup", "compile", "eager", "record", "exit")


def _cell(v):
    return f"{v:>7.1f}" if isinstance(v, (int, float)) else f"{'-':>7}"


WORKER_MARKS = ("start", "collected", "cold asked", "sessionfinish")


def phase_edges(data):
    """The first phase's start and the last one's end, in the timeline's seconds (the
    leases are wall-clock; the timeline's `created` is the report's `created`, an older
    report's `report` a little after it)."""
    timeline = data.get("timeline") or {}
    at = timeline.get("created", timeline.get("report"))
    leases = [le for c in data["checks"] for le in c.get("leases") or []]
    if at is None or not data.get("created") or not leases:
        return None, None
    zero = datetime.fromisoformat(data["created"]).timestamp() - at
    return (min(le["acquired"] for le in leases) - zero,
            max(le["released"] for le in leases) - zero)


def print_session(data):
    """The session around its phases: each worker's instants, then the phases' edges."""
    timeline = data.get("timeline") or {}
    workers = sorted({k.split()[0] for k in timeline if k.startswith("gw")},
                     key=lambda w: int(w[2:]) if w[2:].isdigit() else 0)
    head = " ".join(f"{m:>13}" for m in WORKER_MARKS + ("lanes ready",))
    print(f"  {'worker':<8} {head}")
    for w in workers:
        ready = [v for k, v in timeline.items()
                 if k.startswith(f"{w} lane") and k.endswith(("preload done", " stack"))]
        cells = [timeline.get(f"{w} {m}") for m in WORKER_MARKS] + [max(ready, default=None)]
        print(f"  {w:<8} " + " ".join(f"{_cell(v):>13}" for v in cells))
    first, last = phase_edges(data)
    if first is not None:
        print(f"  first phase started {first:.1f} s, last ended {last:.1f} s, "
              f"report {timeline['report']:.1f} s (seconds since the controller started)")


def main(paths):
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        print(path)
        head = " ".join(f"{s:>7}" for s in STAGES)
        print(f"  {'check':<24} {'phase':<5} {'process':>7} {head}  slot  verdict")
        for c in sorted(data["checks"], key=lambda c: c["nodeid"]):
            t = c.get("timings") or {}
            slots = {le["phase"]: le["slot"] for le in c.get("leases") or []}
            name = c["nodeid"].split("::")[-1]
            name = name[name.find("[") + 1:-1] if name.endswith("]") else name
            for phase in ("cold", "warm"):
                if t.get(f"{phase}_process_s") is None:
                    continue
                cells = " ".join(_cell(t.get(f"{phase}_{s}_s" if s != "compile" else f"{phase}_s"))
                                 for s in STAGES)
                print(f"  {name[-24:]:<24} {phase:<5} {_cell(t[f'{phase}_process_s'])} {cells}  "
                      f"{slots.get(phase, '-'):<5} {c['verdict']}")
                name = ""
        print_session(data)


if __name__ == "__main__":
    main(sys.argv[1:])
