"""Per check of sharding reports: each phase's process seconds, split into start-up
(interpreter, pytest, import torch), setup (fixtures, model built), compile+run, eager
reference, record and exit; and the slot each phase had. Shows where wall time went.

    python benchmarks/sharding/timings.py $OUT/sharding-1x1.json $OUT/sharding-2x1.json
"""
import json
import sys

STAGES = ("startup", "setup", "compile", "eager", "record", "exit")


def _cell(v):
    return f"{v:>7.1f}" if isinstance(v, (int, float)) else f"{'-':>7}"


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


if __name__ == "__main__":
    main(sys.argv[1:])
