"""Plugin vs the hand-written pair, side by side in one run.

    python benchmarks/speed/run.py [--rounds 2] [--models resnet18_train,...]
                                   [--launchers preloaded,fresh] [--out DIR]
                                   [--trees before=DIR,after=DIR] [--first-round N]
                                   [--typical-install] [--profile]

Per round and model, in an order that alternates between rounds: the hand-written pair
(`cold_warm.py` twice over one fresh cache dir, TORCH_COMPILE_JOB_ID set, normal exits)
and one `pytest --compile-cache-check` session per launcher (`--compile-cache-store=none`),
each timed from start to exit. Prints per model the medians and spreads, the ratio
plugin / pair per launcher, and the plugin's phase split (from the report's timings).
No numpy: it runs in the user's environment.

`--typical-install` first writes the bytecode of the packages the processes import
(compileall) and unsets PYTHONDONTWRITEBYTECODE, as a `pip install` leaves an environment
(the device image ships torch without bytecode). `--profile` has every process of the
plugin sessions write a cProfile (conftest.py, SPEED_PROFILE) and prints, per process,
its import share and the phase's steps into profiles.txt, then the top functions.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

HERE = Path(__file__).resolve().parent
STAGES = ("startup", "setup", "s", "eager", "record", "exit")  # "s": compile+run
# where start-up (the wait for the preloaded imports), setup and record go (ModelCase checks)
DETAIL = ("wait", "setup_collect", "setup_fixtures", "setup_to_device", "setup_observe",
          "record_compare", "record_finish")


def hand_pair(model: str, log: Path) -> float:
    d = Path(tempfile.mkdtemp(prefix="speed-pair-"))
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(d / "ind"),
           "TRITON_CACHE_DIR": str(d / "tri"), "TORCH_COMPILE_JOB_ID": "p1"}
    t0 = time.perf_counter()
    with open(log, "a") as f:
        for _ in ("cold", "warm"):
            subprocess.run([sys.executable, str(HERE / "cold_warm.py"), model], env=env,
                           stdout=f, stderr=subprocess.STDOUT, check=True)
    wall = time.perf_counter() - t0
    shutil.rmtree(d, ignore_errors=True)
    return wall


def _entry_point() -> bool:
    """Whether the plugin's pytest11 entry point is installed (else it is loaded by name;
    with an installed one, a tree first on PYTHONPATH is what the entry point imports)."""
    from importlib import metadata

    return any(e.name == "compilecache" for e in metadata.entry_points(group="pytest11"))


def plugin(model: str, launcher: str, report: Path, log: Path,
           tree: Optional[str] = None, profile: Optional[Path] = None) -> float:
    """One plugin session; `tree`: the plugin's code from that checkout (first on
    PYTHONPATH), so that two versions run in one call on the same card."""
    argv = [sys.executable, "-m", "pytest", str(HERE / "test_speed_models.py") + f"::test_{model}",
            "-p", "no:cacheprovider", "-q", "--compile-cache-check", "--compile-cache-store=none",
            f"--compile-cache-launcher={launcher}", f"--compile-cache-report={report}"]
    env = dict(os.environ)
    if tree:
        env["PYTHONPATH"] = os.pathsep.join([tree] + ([env["PYTHONPATH"]]
                                                     if env.get("PYTHONPATH") else []))
    if profile:
        profile.mkdir(parents=True, exist_ok=True)
        env["SPEED_PROFILE"] = str(profile)
    if not _entry_point() and "pytest_compilecache" not in env.get("PYTEST_PLUGINS", ""):
        argv[3:3] = ["-p", "pytest_compilecache.plugin"]  # a checkout on PYTHONPATH
    t0 = time.perf_counter()
    with open(log, "a") as f:
        f.write(f"== {model} {launcher} {tree or ''}\n")
        f.flush()
        subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, cwd=HERE, env=env)
    return time.perf_counter() - t0


def floor(model: str, log: Path) -> float:
    """What a plain pytest pays before any test runs, plugin or not: its start and the
    collection of the same test (the module's own imports: torch, torchvision), no
    plugin (`-p no:compilecache`, PYTEST_PLUGINS unset)."""
    argv = [sys.executable, "-m", "pytest", str(HERE / "test_speed_models.py") + f"::test_{model}",
            "-p", "no:cacheprovider", "-p", "no:compilecache", "-q", "--collect-only"]
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_PLUGINS"}
    t0 = time.perf_counter()
    with open(log, "a") as f:
        subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, cwd=HERE, env=env)
    return time.perf_counter() - t0


def split(report: Path) -> Dict[str, object]:
    data = json.loads(report.read_text())
    c = data["checks"][0]
    t = c["timings"]
    out: Dict[str, object] = {"verdict": c["verdict"], "launch": c.get("launch"),
                              "timeline": data.get("timeline"),
                              # a passing check's report (one check per session)
                              "report_kb": round(report.stat().st_size / 1024, 1)}
    for phase in ("cold", "warm"):
        out[phase] = {st: t.get(f"{phase}_{st}" if st == "s" else f"{phase}_{st}_s")
                      for st in STAGES + DETAIL}
        out[phase]["process"] = t.get(f"{phase}_process_s")
    return out


# the packages a session's processes import, compiled by --typical-install
TYPICAL = ("torch", "torchvision", "triton", "_pytest", "pytest", "pluggy", "xdist", "execnet",
           "filelock", "sympy", "jinja2", "networkx", "fsspec", "transformers")
# a phase's steps, as --profile reports their cumulative seconds
STEPS = ("compile_and_run", "references", "random_tensors", "_compare", "compare_with_eager",
         "compare_with_cold", "load_outputs", "save_outputs", "model_in_float64", "record")


def typical_install() -> None:
    import torch  # where the packages are

    site = Path(torch.__file__).parent.parent
    dirs = [str(site / p) for p in TYPICAL if (site / p).is_dir()]
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", *dirs], check=False,
                   stdout=subprocess.DEVNULL)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    print(f"typical install: bytecode of {len(dirs)} packages written in "
          f"{time.perf_counter() - t0:.0f} s, PYTHONDONTWRITEBYTECODE unset", flush=True)


def profiles(where: Path, n: int = 30) -> str:
    """Per profiled process: its seconds, the imports' share, the phase's steps; then
    the top functions by own time and the plugin's by cumulative time."""
    import io
    import pstats

    buf = io.StringIO()
    files = sorted(where.rglob("*.prof"), key=lambda p: p.stat().st_mtime)
    for f in files:
        st = pstats.Stats(str(f), stream=buf)
        imp = comp = 0.0
        steps: Dict[str, float] = {}
        for (file, _, name), (_, _, tt, ct, _) in st.stats.items():  # type: ignore[attr-defined]
            if name == "_find_and_load":
                imp = max(imp, ct)
            if name in ("<built-in method builtins.compile>", "compile") and file == "~":
                comp += tt
            if name in STEPS and "pytest_compilecache" in file:
                steps[name] = max(steps.get(name, 0.0), ct)
        buf.write(f"{f.relative_to(where)}: {st.total_tt:.1f} s; imports {imp:.1f} s "  # type: ignore[attr-defined]
                  f"(compiling sources {comp:.1f} s); steps " + ", ".join(
                      f"{k} {v:.2f}" for k, v in sorted(steps.items(), key=lambda kv: -kv[1])) + "\n")
    for f in files:
        buf.write(f"\n===== {f.relative_to(where)}\n")
        st = pstats.Stats(str(f), stream=buf)
        st.sort_stats("tottime").print_stats(n)
        st.sort_stats("cumulative").print_stats("pytest_compilecache", n)
    return buf.getvalue()


def describe(xs: List[float]) -> str:
    return f"{statistics.median(xs):.1f} [{min(xs):.1f}-{max(xs):.1f}]"


SESSION_LIMIT = 1.15  # issue 54: a session at most 1.15x its phases' compile+run
LAUNCHER_GAIN = 0.95  # the preloaded launcher stays where it saves 5% of session wall


def print_limits(models: List[str], launchers: List[str],
                 walls: Dict[str, Dict[str, List[float]]],
                 splits: Dict[str, Dict[str, List[object]]]) -> None:
    """Each round's ratios against their limits: session wall / its phases' compile+run
    (cold s + warm s), beside it the same less what a plain pytest pays before any test
    (`floor`, measured in the same round), and preloaded / fresh session wall."""
    print(f"\nagainst the limits: session / compile+run (limit {SESSION_LIMIT}), and the "
          f"session less plain pytest's start and collection (no plugin) / compile+run; "
          f"preloaded / fresh (kept where <= {LAUNCHER_GAIN})")
    for m in models:
        floors = walls[m].get("floor", [])
        for k in launchers:
            for r, (x, sp) in enumerate(zip(walls[m].get(k, []), splits[m].get(k, []))):
                runs = [sp[ph]["s"] for ph in ("cold", "warm")]  # type: ignore[index]
                if None in runs:
                    continue
                cr = sum(runs)
                line = (f"{m} {k}: session {x:.1f} s / compile+run {cr:.1f} s = {x / cr:.2f}"
                        + (" over" if x / cr > SESSION_LIMIT else ""))
                if r < len(floors):
                    less = x - floors[r]
                    line += (f"; less plain pytest's {floors[r]:.1f} s: {less:.1f} s / "
                             f"{cr:.1f} s = {less / cr:.2f}")
                print(line)
        pre, fresh = walls[m].get("preloaded", []), walls[m].get("fresh", [])
        for r, (x, y) in enumerate(zip(pre, fresh)):
            print(f"{m} round {r}: preloaded {x:.1f} s / fresh {y:.1f} s = {x / y:.3f}"
                  + (" (keeps its place)" if x / y <= LAUNCHER_GAIN else " (under 5%)"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--models", default="resnet18_train,resnet152_ro,gpt2_inference")
    ap.add_argument("--launchers", default="preloaded,fresh")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/speed"))
    ap.add_argument("--first-round", type=int, default=0,
                    help="number the rounds from here (the order alternates by it): a run "
                         "cut short goes on where it stopped")
    ap.add_argument("--trees", default="",
                    help="NAME=DIR,...: each launcher once per checkout of the plugin (its "
                         "code by PYTHONPATH), e.g. before=/x/old,after=. (before/after "
                         "in one run, on one card)")
    ap.add_argument("--typical-install", action="store_true",
                    help="bytecode written for the imported packages, PYTHONDONTWRITEBYTECODE "
                         "unset, as a pip install leaves an environment")
    ap.add_argument("--profile", action="store_true",
                    help="profile every process of the plugin sessions: OUT/prof, profiles.txt")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    models = a.models.split(",")
    trees = dict(t.split("=", 1) for t in a.trees.split(",") if t)
    launchers = [f"{k}@{t}" for t in trees for k in a.launchers.split(",")] if trees \
        else a.launchers.split(",")
    walls: Dict[str, Dict[str, List[float]]] = {m: {} for m in models}
    splits: Dict[str, Dict[str, List[object]]] = {m: {} for m in models}
    log = out / "speed.log"
    if a.typical_install:
        typical_install()
    for r in range(a.first_round, a.first_round + a.rounds):
        for m in models:
            kinds = ["pair", "floor"] + launchers
            for kind in (kinds if r % 2 == 0 else kinds[::-1]):
                if kind == "pair":
                    w = hand_pair(m, log)
                elif kind == "floor":
                    w = floor(m, log)
                else:
                    rep = out / f"{m}-{kind.replace('@', '-')}-{r}.json"
                    launcher, _, tree = kind.partition("@")
                    w = plugin(m, launcher, rep, log,
                               str(Path(trees[tree]).resolve()) if tree else None,
                               out / "prof" / rep.stem if a.profile else None)
                    if rep.exists():
                        sp = split(rep)
                        procs = [sp[ph]["process"] for ph in ("cold", "warm")]  # type: ignore[index]
                        # the controller's own time: its start, collection, the wait for
                        # the preloaded interpreters, reporting
                        sp["session"] = round(w - sum(procs), 3) if None not in procs else None
                        splits[m].setdefault(kind, []).append(sp)
                walls[m].setdefault(kind, []).append(w)
                print(f"round {r} {m} {kind}: {w:.1f} s", flush=True)
                (out / "speed.json").write_text(json.dumps({"walls": walls, "splits": splits},
                                                           indent=1))  # a cut run keeps it
                if kind not in ("pair", "floor") and splits[m].get(kind):  # a cut run keeps it
                    print(f"    {json.dumps(splits[m][kind][-1])}", flush=True)
    print("\nmodel | hand-written pair s | " + " | ".join(f"plugin {k} s | ratio {k}"
                                                      for k in launchers))
    for m in models:
        pair = walls[m].get("pair", [])
        cells = [describe(pair)]
        for k in launchers:
            xs = walls[m].get(k, [])
            ratios = [x / p for x, p in zip(xs, pair)]
            cells += [describe(xs), describe(ratios) if ratios else "-"]
        print(f"{m} | " + " | ".join(cells))
    print("\nper round: model kind: plugin s / pair s = ratio")
    for m in models:
        pair = walls[m].get("pair", [])
        for k in launchers:
            print(f"{m} {k}: " + "; ".join(f"round {r} {x:.1f} / {p:.1f} = {x / p:.3f}"
                                           for r, (x, p) in enumerate(zip(walls[m].get(k, []), pair))))
    print("\nphase split (median s): model launcher phase: process = startup + setup + "
          "compile+run + eager + record + exit")
    for m in models:
        for k, runs in splits[m].items():
            for phase in ("cold", "warm"):
                def med(st: str) -> str:
                    vals = [x[phase][st] for x in runs if x[phase].get(st) is not None]  # type: ignore[index]
                    return f"{statistics.median(vals):.1f}" if vals else "-"
                print(f"{m} {k} {phase}: {med('process')} = " + " + ".join(
                    med(st) for st in STAGES) + f"  verdicts {[x['verdict'] for x in runs]}"
                      f" launch {[x['launch'] for x in runs][:1]}")
                print("    " + ", ".join(f"{st} {med(st)}" for st in DETAIL))
            sess = [x["session"] for x in runs if x.get("session") is not None]  # type: ignore[union-attr]
            if sess:
                print(f"{m} {k} session wall minus its phase processes: {describe(sess)}")
    print_limits(models, launchers, walls, splits)
    (out / "speed.json").write_text(json.dumps({"walls": walls, "splits": splits}, indent=1))
    if a.profile:
        text = profiles(out / "prof")
        (out / "profiles.txt").write_text(text)
        print("\nprofiled processes (" + str(out / "profiles.txt") + "):")
        print(text.split("\n=====", 1)[0])


if __name__ == "__main__":
    main()
