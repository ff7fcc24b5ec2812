"""Record real cold/warm phase records for tests/test_judges.py (see README.md here).

    # in the development install of the README
    python tests/data/records/record.py            # every session below, one at a time
    python tests/data/records/record.py local      # one session (local, pgo_job_id, paths)

Each session writes a model repo into a temporary directory (the same models, conftests
and test bodies as the slow tests named in README.md) and runs
`pytest --compile-cache-check` on it in a fresh process, as tests/conftest.py's run_repo
does, with this file loaded as a plugin (`-p record`). The plugin wraps every warm-start
path's `judge` (pytest_compilecache.paths.scenarios.REGISTRY) in the controller and dumps
what the judge received: the phase records, the file snapshots, the timings, the Triton
dir, and what it returned. After the session, `cut` shrinks each dump to what the judges
read (key components only where a rule compares them), re-judges the cut record and
checks that it gives the same verdict, layers, problems and notes as the full one, and
writes `<case>.json` with the session's own result (its JSON report) as `expected`.
"""
from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any, Dict, List

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]

# --------------------------------------------------------------------------------------
# the plugin part: runs in the recording session's controller


def pytest_configure(config: Any) -> None:
    out = os.environ.get("RECORD_OUT")
    if not out or os.environ.get("PYTEST_COMPILECACHE_CHILD"):
        return
    for path in set(path_registry().values()):
        for cls in path.__mro__:  # where each path's judge is defined (a base, often)
            if "judge" in cls.__dict__ and not hasattr(cls.__dict__["judge"], "__wrapped__"):
                cls.judge = _wrapped(cls.__dict__["judge"], Path(out))


def warm_sources(recs: Dict[str, Any], snaps: Dict[str, Any]) -> Dict[str, str]:
    """What an artifact path's judge reads from disk: the head (4096 characters, as
    `files.cpu_capability_probes` reads) of each C++ source the warm process wrote into
    its fresh root, to tell torch's CPU capability probes from the model's kernels."""
    watched = ((recs.get("warm") or {}).get("artifact") or {}).get("watched") or {}
    out = {}
    for path in snaps.get("warm") or {}:
        label, _, rel = path.partition("/")
        if path.endswith(".cpp") and label in watched:
            try:
                with open(os.path.join(watched[label], rel), errors="replace") as f:
                    out[path] = f.read(4096)
            except OSError:
                pass
    return out


def materialize(sources: Dict[str, str], recs: Dict[str, Any], where: Path) -> None:
    """The sources written under `where`, and the warm record's watched dirs pointed
    there (what tests/test_judges.py does too)."""
    art = ((recs.get("warm") or {}).get("artifact") or {})
    for path, text in sources.items():
        (where / path).parent.mkdir(parents=True, exist_ok=True)
        (where / path).write_text(text)
    if art.get("watched"):
        art["watched"] = {label: str(where / label) for label in art["watched"]}


def path_registry() -> Dict[str, Any]:
    """The warm-start paths by name: `paths.builtin()` (one module per path), else the
    older `paths.scenarios.REGISTRY`."""
    import pytest_compilecache.paths as paths

    if hasattr(paths, "builtin"):
        return paths.builtin()
    from pytest_compilecache.paths import scenarios

    return dict(scenarios.REGISTRY)


_INSIDE: List[bool] = []  # a path's judge that calls its base's is recorded once, outermost


def _wrapped(judge: Any, out: Path) -> Any:
    def recording_judge(self, nodeid, recs, snaps, timings, triton_dir):
        if _INSIDE:
            return judge(self, nodeid, recs, snaps, timings, triton_dir)
        # the controller's records are typed (wire.PhaseRecord); each keeps its JSON
        raw = {phase: getattr(rec, "raw", rec) for phase, rec in recs.items()}
        dump = {"via": self.via, "nodeid": nodeid, "recs": json.loads(json.dumps(raw, default=str)),
                "snaps": snaps, "timings": dict(timings),
                "triton_dir": str(triton_dir) if triton_dir else None,
                "triton_dir_existed": bool(triton_dir and Path(triton_dir).is_dir())}
        if triton_dir and Path(triton_dir).is_dir():
            dump["triton_listing"] = sorted(str(p.relative_to(triton_dir))
                                            for p in Path(triton_dir).rglob("*"))
        dump["sources"] = warm_sources(raw, snaps)
        _INSIDE.append(True)
        try:
            res = judge(self, nodeid, recs, snaps, timings, triton_dir)
        finally:
            _INSIDE.pop()
        dump["judged"] = res.to_json()
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{nodeid}__{self.via}")
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{name}.raw.json").write_text(json.dumps(dump, default=str))
        return res
    recording_judge.__wrapped__ = judge
    return recording_judge


# --------------------------------------------------------------------------------------
# the sessions: model repos as the slow tests build them (tests/conftest.py's MODELS)

sys.path.insert(0, str(REPO / "tests"))


def _slow(module: str, name: str) -> str:
    """A string constant of a slow test module, read from its source (no import)."""
    import ast

    tree = ast.parse((REPO / "tests" / f"{module}.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name
                                                for t in node.targets):
            return ast.literal_eval(node.value)
    raise KeyError(f"{module}.{name}")


def local_files() -> Dict[str, str]:
    case = _slow("test_checks_miss", "CASE")
    files: Dict[str, str] = {}
    # tests/test_checks_hit.py's inference MLP and its forward with grad enabled
    fixtures = _slow("test_checks_hit", "TESTS").split(
        "@pytest.mark.compile_cache\ndef test_inference")[0]
    files["hit/test_hit.py"] = fixtures + '''
@pytest.mark.compile_cache
def test_inference(mlp_inference):
    ...


@pytest.mark.compile_cache
def test_forward_without_backward(mlp_forward_with_grad):
    ...
'''
    # tests/test_checks_miss.py's conftests, one directory each
    for sub, conftest, model, name in (
            ("drift", _slow("test_checks_miss", "DRIFT_CONFTEST"), "MLP", "test_drift"),
            ("bypass", _slow("test_checks_miss", "BYPASS_CONFTEST"), "MLP", "test_bypass"),
            ("corrupt", _slow("test_checks_miss", "CORRUPT_CONFTEST"), "Scaled", "test_corrupt"),
            ("noise", _slow("test_checks_miss", "NOISE_CONFTEST"), "MLP", "test_noise"),
            ("fx_deleted", FX_DELETED_CONFTEST, "MLP", "test_fx_deleted"),
            ("kernels_deleted", KERNELS_DELETED_CONFTEST, "Scaled", "test_kernels_deleted")):
        files[f"{sub}/conftest.py"] = conftest
        files[f"{sub}/{name}.py"] = case.format(model=model, name=name)
    files["constant/test_constant.py"] = _slow("test_checks_miss", "CONSTANT_CASE")
    # tests/test_random.py
    files["random/random_models.py"] = _slow("test_random", "MODELS")
    files["random/test_random_models.py"] = _slow("test_random", "TESTS").split(
        "@pytest.mark.compile_cache\ndef test_drop_path_training")[0]
    # tests/test_recompiles.py
    files["recompiles/test_regional.py"] = _slow("test_recompiles", "TESTS")
    # tests/test_pgo.py, no job id
    files["pgo/test_serve.py"] = _slow("test_pgo", "TESTS")
    return files


# Between cold and warm, the FX-graph cache's entries are deleted (a cache pruned, or
# a partial copy): the warm run looks up the key cold saved and finds nothing.
FX_DELETED_CONFTEST = '''
import shutil


def pytest_compilecache_between_phases(item, cache_root):
    shutil.rmtree(cache_root / "inductor" / "fxgraph")
'''

# Between cold and warm, the compiled C++ kernels (the .so objects) are deleted: the
# FX entry still hits and the warm process builds them again.
KERNELS_DELETED_CONFTEST = '''
def pytest_compilecache_between_phases(item, cache_root):
    for f in (cache_root / "inductor").rglob("*.so"):
        f.unlink()
'''


def sessions() -> Dict[str, Dict[str, Any]]:
    paths_tests = _slow("test_paths", "TESTS")
    return {
        "local": {"files": local_files(), "args": [], "env": {}},
        "pgo_job_id": {"files": {"pgo/test_serve.py": _slow("test_pgo", "TESTS")},
                       "args": ["-k", "test_varying_batch and not closure"],
                       "env": {"TORCH_COMPILE_JOB_ID": "scorer-v1"}},
        "variants": {"files": {"variants/test_variants.py": _slow("test_false_hits", "TESTS")},
                     "args": ["--compile-cache-share-variants", "-p", "no:randomly"], "env": {}},
        "paths": {"files": {"test_paths.py": paths_tests},
                  "args": ["--compile-cache-via=mega,aot", "-k",
                           "test_fused or test_linear and not damaged"],
                  "env": {}},
    }


# which check of which session is which case, and the slow test that provokes it
CASES = {
    "pass_mlp": ("local", "hit/test_hit.py::test_inference", "local"),
    "never_saved_aot": ("local", "hit/test_hit.py::test_forward_without_backward", "local"),
    "fx_config_drift": ("local", "drift/test_drift.py::test_drift", "local"),
    "bypass_custom_pass": ("local", "bypass/test_bypass.py::test_bypass", "local"),
    "fx_entry_deleted": ("local", "fx_deleted/test_fx_deleted.py::test_fx_deleted", "local"),
    "kernels_deleted": ("local", "kernels_deleted/test_kernels_deleted.py::test_kernels_deleted",
                        "local"),
    "stale_entry": ("local", "corrupt/test_corrupt.py::test_corrupt", "local"),
    "noise_within_tolerance": ("local", "noise/test_noise.py::test_noise", "local"),
    "other_graph_constant": ("local", "constant/test_constant.py::test_constant", "local"),
    "dropout_training": ("local", "random/test_random_models.py::test_dropout_training",
                         "local"),
    "recompile_limit": ("local", "recompiles/test_regional.py::test_blocks_differ_in_a_string",
                        "local"),
    "warm_recompiles_more": ("local", "recompiles/test_regional.py::"
                                      "test_only_the_warm_process_recompiles", "local"),
    "dynamo_reset": ("local", "recompiles/test_regional.py::test_reset_between_calls", "local"),
    "pgo_no_job_id": ("local", "pgo/test_serve.py::test_varying_batch", "local"),
    "pgo_closure_no_job_id": ("local", "pgo/test_serve.py::test_varying_batch_in_a_closure",
                              "local"),
    "pgo_job_id": ("pgo_job_id", "pgo/test_serve.py::test_varying_batch", "local"),
    "mega_linear": ("paths", "test_paths.py::test_linear", "mega"),
    "mega_fused": ("paths", "test_paths.py::test_fused", "mega"),
    "aot_linear": ("paths", "test_paths.py::test_linear", "aot"),
    "aot_fused": ("paths", "test_paths.py::test_fused", "aot"),
    "false_hit_custom_pass": ("variants", "variants/test_variants.py::test_blind[three]",
                              "shared"),
    "shared_entry_equal": ("variants", "variants/test_variants.py::test_blind[two-again]",
                           "shared"),
    "variants_keyed_miss": ("variants", "variants/test_variants.py::test_keyed[three]",
                            "shared"),
}


def run_session(name: str, work: Path) -> None:
    from conftest import MODELS

    spec = sessions()[name]
    repo = work / name
    raw = work / f"{name}-raw"
    repo.mkdir(parents=True)
    (repo / "models.py").write_text(MODELS)
    (repo / "pytest.ini").write_text("[pytest]\n")
    for fname, text in spec["files"].items():
        (repo / fname).parent.mkdir(parents=True, exist_ok=True)
        (repo / fname).write_text(textwrap.dedent(text))
    base = {k: v for k, v in os.environ.items()
            if k not in ("PYTEST_ADDOPTS", "TORCH_COMPILE_JOB_ID", "TORCH_COMPILE_STICKY_PGO_KEY")}
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "record", "-rA",
           "--compile-cache-check", f"--compile-cache-report={repo / 'report.json'}",
           "--compile-cache-store=none", *spec["args"]]
    print(f"[{name}] {' '.join(cmd)} (in {repo})", flush=True)
    proc = subprocess.run(cmd, cwd=repo, env={**base, "RECORD_OUT": str(raw), **spec["env"],
                                              "PYTHONPATH": f"{repo}:{HERE}:{work / 'pkg'}"},
                          capture_output=True, text=True, timeout=1800)
    (work / f"{name}.out").write_text(proc.stdout + proc.stderr)
    print(proc.stdout[-2500:], flush=True)
    write_cases(name, work)


def write_cases(name: str, work: Path) -> None:
    """The case files of session `name` from its dumps in `work` (`--recut WORK`)."""
    spec = sessions()[name]
    repo, raw = work / name, work / f"{name}-raw"
    out = (work / f"{name}.out").read_text()
    report = json.loads((repo / "report.json").read_text())
    for case, (sess, nodeid, via) in CASES.items():
        if sess != name:
            continue
        [expected] = [c for c in report["checks"] if c["nodeid"] == nodeid and c["via"] == via]
        dump_name = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{nodeid}__{via}")
        dump = json.loads((raw / f"{dump_name}.raw.json").read_text())
        write_case(case, dump, expected, name, spec, out)


# --------------------------------------------------------------------------------------
# cutting a dump down to what the judges read

COMPARED = ("verdict", "layers", "problems", "notes", "outputs", "dynamo")


def judge_dump(dump: Dict[str, Any]) -> Dict[str, Any]:
    cls = path_registry()[dump["via"]]
    judge = getattr(cls.judge, "__wrapped__", cls.judge)
    recs = json.loads(json.dumps(dump["recs"]))
    with tempfile.TemporaryDirectory() as where:  # not where the session's roots were
        materialize(dump.get("sources") or {}, recs, Path(where))
        res = judge(cls(), dump["nodeid"], recs, dump["snaps"], dict(dump["timings"]), None)
    return {k: v for k, v in res.to_json().items() if k in COMPARED}


def _entries(cache: Dict[str, Any]):
    for cid, g in (cache.get("graphs") or {}).items():
        for layer in ("aot_autograd", "fx_graph"):
            for e in g.get(layer) or []:
                yield layer, cid, e


KEEP_COMPONENTS = ("grad_enabled", "gm")
VALUE_CUT = 60


def cut_record(rec: Dict[str, Any], needed: set, first_lines: bool = True) -> Dict[str, Any]:
    """A phase record without what no judge reads: the key components no rule compares
    (the values of those kept cut short, except the ones a reason quotes); with
    `first_lines`, Dynamo's recompile reasons cut to their first line (the guard: the
    user stack trace under it is read by no judge; the PGO layer quotes the first two)."""
    rec = json.loads(json.dumps(rec))
    cache = rec.get("cache") or {}
    if first_lines:  # the first two whole: the PGO layer quotes them
        cache["recompile_reasons"] = [" ".join(str(r).splitlines()[0].split())
                                      if i >= 2 and str(r).strip() else r for i, r in
                                      enumerate(cache.get("recompile_reasons") or [])]
        for c in (cache.get("dynamo") or {}).get("compiles") or []:
            if c.get("recompile_reason"):
                c["recompile_reason"] = c["recompile_reason"].splitlines()[0]
    for _, _, e in _entries(cache):
        comps = []
        for c in e.get("components") or []:
            if c[0] in needed or c[0] in KEEP_COMPONENTS:
                c = list(c)
                if c[0] not in needed and isinstance(c[2], str) and len(c[2]) > VALUE_CUT:
                    c[2] = c[2][:VALUE_CUT] + "…"
                comps.append(c)
        e["components"] = comps
    _cut_ledger(rec, needed)
    return rec


def _cut_ledger(rec: Dict[str, Any], needed: set) -> None:
    """A shared turn's view of the variants' ledger (`variants`, controller/variants.py):
    the entries it did not load keep the components `differing` found them to differ in
    from the turn's own (the note names them) and those every entry keeps; a loaded entry
    is already small (its extension-point components and a count)."""
    for e in ((rec.get("variants") or {}).get("not_loaded") or {}).values():
        e["components"] = [
            list(c[:2]) + [c[2] if c[0] in needed or len(str(c[2])) <= VALUE_CUT
                           else str(c[2])[:VALUE_CUT] + "…"]
            for c in e.get("components") or [] if c[0] in needed or c[0] in KEEP_COMPONENTS]


def differing(recs: Dict[str, Any]) -> set:
    from pytest_compilecache.layers import keys

    names = set()
    for rec in recs.values():  # a shared turn beside the entries other variants wrote
        others = list(((rec or {}).get("variants") or {}).get("not_loaded", {}).values())
        for layer, _, e in _entries((rec or {}).get("cache") or {}):
            twin = keys.best_match(e, [o for o in others if o.get("layer") == layer])
            if twin is not None:
                names |= {d["component"] for d in keys.differing_components(twin, e)}
    cold = list(_entries((recs.get("cold") or {}).get("cache") or {}))
    for phase, rec in recs.items():
        if phase == "cold":
            continue
        for layer, _, e in _entries((rec or {}).get("cache") or {}):
            twin = keys.best_match(e, [c for lay, _, c in cold if lay == layer])
            if twin is not None:
                names |= {d["component"] for d in keys.differing_components(twin, e)}
    return names


def write_case(case: str, dump: Dict[str, Any], expected: Dict[str, Any], session: str,
               spec: Dict[str, Any], out: str) -> None:
    if "sources" not in dump:  # a dump of before the plugin kept them: the roots, if kept
        dump["sources"] = warm_sources(dump["recs"], dump["snaps"])
    full = judge_dump(dump)
    assert full["verdict"] == dump["judged"]["verdict"] and \
        full["layers"] == dump["judged"]["layers"], f"{case}: re-judged otherwise"
    needed = differing(dump["recs"])
    for first_lines in (True, False):  # the least kept that judges as the full record
        small = dict(dump, recs={p: cut_record(r, needed, first_lines)
                                 for p, r in dump["recs"].items()})
        if judge_dump(small) == full:
            break
        print(f"[{case}] cut to first lines, the record judges otherwise", flush=True)
    else:  # keep everything rather than change what the judge says
        print(f"[{case}] the cut record judges otherwise: kept whole", flush=True)
        small = dump
    import torch

    line = next((x for x in out.splitlines() if expected["nodeid"] in x and
                 re.search(r"\b(PASS|FAIL|ERROR|pass|fail|error)", x)), None)
    record = {
        "case": case,
        "recorded": {"session": session, "args": spec["args"], "env": spec["env"],
                     "torch": torch.__version__, "python": sys.version.split()[0],
                     "date": datetime.date.today().isoformat()},
        "via": dump["via"], "nodeid": dump["nodeid"],
        "recs": small["recs"], "snaps": dump["snaps"], "timings": dump["timings"],
        "triton_dir_existed": dump["triton_dir_existed"],
        "sources": dump["sources"],
        "expected": {"verdict": expected["verdict"],
                     "layers": expected["layers"], "problems": expected["problems"],
                     "notes": expected["notes"], "outputs": expected["outputs"],
                     "dynamo": expected.get("dynamo"), "session_line": line},
    }
    path = HERE / f"{case}.json"
    path.write_text(json.dumps(record, indent=0, sort_keys=True) + "\n")
    print(f"[{case}] {path.name}: {path.stat().st_size // 1024} KB, verdict "
          f"{expected['verdict']}", flush=True)


def main(argv: List[str]) -> None:
    if argv[:1] == ["--recut"]:  # case files again from a finished run's dumps
        work = Path(argv[1])
        for name in argv[2:] or list(sessions()):
            write_cases(name, work)
        return
    chosen = argv or list(sessions())
    work = Path(tempfile.mkdtemp(prefix="records-"))
    print(f"work dir {work}", flush=True)
    # the plugin as it is now, copied: a recording of some minutes is not disturbed by
    # edits to the working tree meanwhile (the copy comes first on every PYTHONPATH)
    import shutil

    shutil.copytree(REPO / "pytest_compilecache", work / "pkg" / "pytest_compilecache",
                    ignore=shutil.ignore_patterns("__pycache__"))
    sys.path.insert(0, str(work / "pkg"))
    for name in chosen:
        run_session(name, work)


if __name__ == "__main__":
    main(sys.argv[1:])
