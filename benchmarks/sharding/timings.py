"""Per check of sharding reports: process and compile+run seconds per phase, the slot
and compile workers each phase had. Shows where a session's wall time went.

    python benchmarks/sharding/timings.py $OUT/sharding-1x1.json $OUT/sharding-2x1.json
"""
import json
import sys


def main(paths):
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        print(path)
        print(f"  {'check':<24} {'cold proc':>9} {'cold c+r':>8} {'warm proc':>9} {'warm c+r':>8}"
              f"  slots (compile workers)  verdict")
        for c in sorted(data["checks"], key=lambda c: c["nodeid"]):
            t = c.get("timings") or {}
            cells = " ".join(f"{t.get(k) or 0:>{w}.1f}" for k, w in (
                ("cold_process_s", 9), ("cold_s", 8), ("warm_process_s", 9), ("warm_s", 8)))
            slots = ", ".join(f"{le['phase']} {le['slot']} ({le.get('compile_threads', '?')})"
                              for le in c.get("leases") or [])
            name = c["nodeid"].split("::")[-1]
            name = name[name.find("[") + 1:-1] if name.endswith("]") else name
            print(f"  {name[-24:]:<24} {cells}  {slots}  {c['verdict']}")


if __name__ == "__main__":
    main(sys.argv[1:])
