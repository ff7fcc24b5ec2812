"""How much of each profiled process (SPEED_PROFILE, conftest.py) went to imports, and
to which of the phase's steps: python benchmarks/speed/import_share.py DIR"""
import pstats
import sys
from pathlib import Path

STEPS = ("compile_and_run", "references", "random_tensors", "_compare", "compare_with_eager",
         "compare_with_cold", "load_outputs", "save_outputs", "model_in_float64", "record")


def main() -> None:
    for f in sorted(Path(sys.argv[1]).glob("*.prof"), key=lambda p: p.stat().st_mtime):
        st = pstats.Stats(str(f))
        total = st.total_tt
        imp = comp = 0.0
        steps = {}
        for (file, _, name), (_, _, tt, ct, _) in st.stats.items():
            if name == "_find_and_load":
                imp = max(imp, ct)
            if name in ("<built-in method builtins.compile>", "compile") and file == "~":
                comp += tt
            if name in STEPS and "pytest_compilecache" in file:
                steps[name] = max(steps.get(name, 0.0), ct)
        print(f"{f.name}: {total:.1f} s profiled; imports (cumulative) {imp:.1f} s, of which "
              f"compiling sources {comp:.1f} s; steps " + ", ".join(
                  f"{k} {v:.2f}" for k, v in sorted(steps.items(), key=lambda kv: -kv[1])))


if __name__ == "__main__":
    main()
