"""The PR lane's cost, side by side in one run, on a scratch git repository of the
selected tests: main's full check session keeping its caches (--compile-cache-store-
caches), then, for a PR that changes no key (a README edit), the keys-only drift against
main, the deploy over the caches main kept, and the deploy as it was (main compiled again
in a worktree). Prints each session's verdicts, the deploys' layer states and cold-phase
source, the wall seconds and their ratios to main's full check session.

    python benchmarks/pr_lane/run.py                    # CPU: examples/' training check
    bash benchmarks/device.sh run python benchmarks/pr_lane/run.py gpu   # the GPU models

`gpu`: resnet18 training, BERT training and resnet152 under reduce-overhead
(benchmarks/gpu_acceptance/test_gpu_models.py). Reports and logs under $OUT (/tmp/out).
"""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from checksession import session  # noqa: E402
GPU = ("benchmarks/gpu_acceptance", ["test_gpu_models.py"],
       ["-k", "resnet18_training or bert_mlm_training or resnet152_reduce_overhead"])
# the examples' passing check (the other fails by design: a failing check's caches are
# not kept, so its deploy compiles main in a worktree either way)
CPU = ("examples", ["conftest.py", "models.py", "test_models.py"], ["-k", "training"])


def git(repo, *args):
    subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com",
                    *args], cwd=repo, check=True, capture_output=True)


def main(argv):
    out = pathlib.Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    folder, files, args = GPU if argv[:1] == ["gpu"] else CPU
    args = args + argv[1 if argv[:1] == ["gpu"] else 0:]
    repo = pathlib.Path(tempfile.mkdtemp(prefix="pr-lane-")) / "model"
    repo.mkdir()
    for f in files:
        shutil.copy(ROOT / folder / f, repo / f)
    (repo / "pytest.ini").write_text("[pytest]\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "main")
    store, empty = repo.parent / "store", repo.parent / "empty-store"
    walls, runs = {}, {}
    walls["main"], runs["main"] = session(repo, out, "pr-main", args, [
        f"--compile-cache-store={store}", "--compile-cache-store-caches"])
    (repo / "README.md").write_text("a model\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "docs")
    base = "--compile-cache-baseline=HEAD~1"
    walls["keys"], runs["keys"] = session(repo, out, "pr-keys", args, [
        f"--compile-cache-store={store}", base, "--compile-cache-keys-only"])
    walls["stored"], runs["stored"] = session(repo, out, "pr-deploy-stored", args, [
        f"--compile-cache-store={store}", base, "--compile-cache-baseline-warm"])
    walls["worktree"], runs["worktree"] = session(repo, out, "pr-deploy-worktree", args, [
        f"--compile-cache-store={empty}", base, "--compile-cache-baseline-warm"])
    print(f"{'check':<58} main   keys drift  deploy(stored) layers        cold from  deploy(worktree)")
    ok = True
    for nodeid, c in runs["main"].items():
        k = runs["keys"].get(nodeid, {})
        s, w = runs["stored"].get(nodeid, {}), runs["worktree"].get(nodeid, {})
        layers = "/".join((s.get("layers") or {}).get(n, {}).get("state", "-")[:4]
                          for n in ("aot_autograd", "fx_graph", "kernels"))
        print(f"{nodeid[-58:]:<58} {c['verdict']:<6} {(k.get('drift') or {}).get('status', '-'):<11} "
              f"{s.get('verdict', '-'):<14} {layers:<13} {(s.get('launch') or {}).get('cold', '-'):<10} "
              f"{w.get('verdict', '-')}")
        ok &= c["verdict"] == "pass" and s.get("verdict") == "pass" \
            and (s.get("launch") or {}).get("cold") == "stored"
    m = walls["main"]
    print(f"\nwall: main's full check {m:.1f} s; the PR: keys-only {walls['keys']:.1f} s "
          f"({walls['keys'] / m:.2f}), deploy over main's caches {walls['stored']:.1f} s "
          f"({walls['stored'] / m:.2f}), deploy compiling main in a worktree "
          f"{walls['worktree']:.1f} s ({walls['worktree'] / m:.2f})")
    lane = walls["keys"] + walls["stored"]
    print(f"the PR lane (keys-only + deploy over main's caches) {lane:.1f} s against "
          f"{walls['worktree']:.1f} s for the deploy compiling main: ratio "
          f"{lane / walls['worktree']:.2f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
