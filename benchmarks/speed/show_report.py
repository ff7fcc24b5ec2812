"""One plugin report's split, compactly: python benchmarks/speed/show_report.py REPORT [WALL]"""
import json
import sys

STAGES = ("wait", "startup", "setup", "s", "eager", "record", "exit")


def main() -> None:
    d = json.load(open(sys.argv[1]))
    wall = float(sys.argv[2]) if len(sys.argv) > 2 else None
    tl = d.get("timeline") or {}
    print("timeline " + ", ".join(f"{k} {v:.1f}" for k, v in tl.items()))
    for c in d["checks"]:
        t = c["timings"]
        print(c["nodeid"].split("::")[-1], c["verdict"], c.get("launch"), c.get("notes") or "")
        procs = []
        for ph in ("cold", "warm"):
            vals = {st: t.get(f"{ph}_{st}" if st == "s" else f"{ph}_{st}_s") for st in STAGES}
            procs.append(t.get(f"{ph}_process_s") or 0.0)
            print(f"  {ph} {t.get(f'{ph}_process_s')}: " + ", ".join(
                f"{k} {v:.2f}" for k, v in vals.items() if v is not None)
                + "  record_compare %s" % t.get(f"{ph}_record_compare_s"))
        if wall is not None:
            print(f"  session wall {wall:.1f}, minus its phases {wall - sum(procs):.1f}")


if __name__ == "__main__":
    main()
