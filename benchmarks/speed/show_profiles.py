"""Print where each profiled phase spent its time (see conftest.py, SPEED_PROFILE; not
named profile.py, which would shadow the standard library for scripts run from here):
python benchmarks/speed/show_profiles.py DIR [N]"""
import pstats
import sys
from pathlib import Path


def main() -> None:
    where, n = Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 30
    for f in sorted(where.glob("*.prof"), key=lambda p: p.stat().st_mtime):
        print(f"===== {f.name}")
        st = pstats.Stats(str(f))
        st.sort_stats("tottime").print_stats(n)  # where the time is spent
        st.sort_stats("cumulative").print_stats("pytest_compilecache", n)  # in which step


if __name__ == "__main__":
    main()
