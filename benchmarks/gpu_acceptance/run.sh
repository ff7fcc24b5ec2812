#!/usr/bin/env bash
# GPU acceptance: real models checked by the plugin on a GPU, beside plugin-free pairs of
# processes over one cache dir (the truth its verdicts are held against).
#
#   bash benchmarks/gpu_acceptance/run.sh [SCENARIO] [PYTEST ARGS]
#
#   set        (the default) this folder's checks: gpu-report.json, gpu-session.log
#   pairs      the set, with the plugin-free pairs running alongside (GPU contention moves
#              timings, not counts): autotune_pair.py under max-autotune and
#              amp_plain_pair.py's three training bodies, into pairs.log
#   records    the set with --compile-cache-keep; the cold and warm phase records of the
#              autotune and training checks into records.tar.gz (tests/data/autotune_gpu)
#   hostile    a repository whose conftest points Inductor and Triton at a team cache (the
#              check must pass in its private dirs) and whose test body moves Triton's
#              cache dir (an error naming TRITON_CACHE_DIR): hostile-report.json, -session.log
#   drift      drift and the deploy scenario on vit_tiny (timm), in a throwaway git
#              repository of three commits: a comment, then TF32 turned on
#   other-gpu  two GPUs: other_gpu_pair.py (resnet18, BERT training), then the same two
#              checks under --compile-cache-warm-on-other-gpu=index and =pinned
#   load       test_max_autotune.py (swin_t, the MLP, resnet18) alone, then beside the eight
#              sharding models at four checks per GPU, N times each (LOAD_RUNS, default
#              3): the autotune verdicts must not change with the load; the verdict rows
#              into load.log (docs/gpu-results.md)
#
# PYTEST ARGS go to the set's session (`set benchmarks/sharding/test_eight_models.py -n 4
# --compile-cache-jobs-per-gpu=4` adds the eight sharding models). Results go to $OUT
# (default /tmp/out). Prepared by benchmarks/device.sh (torch's ptxas, the plugin); on the
# device tool: bash benchmarks/device.sh start gpu bash benchmarks/gpu_acceptance/run.sh ...
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.." || exit 2
[ -n "${DEVICE_PREPARED:-}" ] || exec bash benchmarks/device.sh run bash "$here/run.sh" "$@"
out=${OUT:-/tmp/out}
mkdir -p "$out"

verdicts() {  # the summary's verdict lines of a session log
  grep -E "^(test_|benchmarks/).*(pass|fail|error|n/a) " "$1" | tail -30
}

session() {  # DEST PYTEST ARGS: one plugin session over this folder
  local dest=$1; shift
  mkdir -p "$dest"
  python -m pytest benchmarks/gpu_acceptance -p no:cacheprovider -rA --compile-cache-check \
    --compile-cache-report="$dest/gpu-report.json" "$@" >"$dest/gpu-session.log" 2>&1
  local rc=$?
  verdicts "$dest/gpu-session.log"
  tail -3 "$dest/gpu-session.log"
  return $rc
}

pairs() {  # the plugin-free pairs, one after another
  local args
  for args in "mlp max-autotune-no-cudagraphs" "resnet18 max-autotune" \
              "mlp max-autotune-no-cudagraphs --delete-best-config"; do
    echo "== autotune_pair.py $args"
    # shellcheck disable=SC2086
    python benchmarks/gpu_acceptance/autotune_pair.py $args | tail -1
  done
  echo "== amp_plain_pair.py"
  python benchmarks/gpu_acceptance/amp_plain_pair.py
}

records() {  # the kept roots' phase records of the autotune and training checks
  python - "$out" <<'PY'
import json, sys, tarfile
from pathlib import Path
out = Path(sys.argv[1])
report = json.loads((out / "gpu-report.json").read_text())
with tarfile.open(out / "records.tar.gz", "w:gz") as tar:
    for c in report["checks"]:
        if any(k in c["nodeid"] for k in ("max_autotune", "autotune_results_deleted", "training")):
            root = Path(c.get("cache_root") or "/nonexistent") / "phases"
            for ph in ("cold", "warm"):
                if (root / f"{ph}.json").exists():
                    tar.add(root / f"{ph}.json", arcname=f"{c['nodeid'].split('::')[-1]}/{ph}.json")
PY
}

hostile() {
  local repo
  repo=$(mktemp -d)/hostile
  mkdir -p "$repo"
  cat >"$repo/conftest.py" <<'PY'
import os

team = os.path.join(os.path.dirname(__file__), "team-cache")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(team, "inductor")
os.environ["TRITON_CACHE_DIR"] = os.path.join(team, "triton")
PY
  cat >"$repo/test_hostile_gpu.py" <<'PY'
import os

import pytest
import torch

from pytest_compilecache import ModelCase


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(64, 256), torch.nn.Linear(256, 8)

    def forward(self, x):
        return self.l2(torch.nn.functional.gelu(self.l1(x)) * 1.5)


@pytest.fixture
def mlp():
    return ModelCase(MLP(), example_inputs=(torch.randn(32, 64),), train=True)


@pytest.mark.compile_cache
def test_team_cache_in_conftest(mlp):
    ...


@pytest.mark.compile_cache
def test_triton_dir_moved_in_the_body(compile_cache):
    os.environ["TRITON_CACHE_DIR"] = os.path.join(os.path.dirname(__file__), "moved")
    model = torch.compile(MLP().to(compile_cache.device))
    compile_cache.record("out", model(torch.randn(32, 64, device=compile_cache.device)))
PY
  (cd "$repo" && python -m pytest -p no:cacheprovider -rA --compile-cache-check \
    --compile-cache-report="$out/hostile-report.json" "$@" test_hostile_gpu.py) \
    >"$out/hostile-session.log" 2>&1
  echo "team-cache files: $(find "$repo/team-cache" -type f 2>/dev/null | wc -l)" >>"$out/hostile-session.log"
  grep -E "(pass|fail|error|n/a) " "$out/hostile-session.log" | tail -5
  tail -1 "$out/hostile-session.log"
}

drift() {  # c0 first; c1 a comment in the model file; c2 turns TF32 on in the package
  local repo c0 c1 c2
  repo=$(mktemp -d)/vit_repo
  mkdir -p "$repo/pkg" "$repo/tests" && cd "$repo" || return 1
  git init -q && git config user.email demo@example.com && git config user.name demo
  printf '[pytest]\npythonpath = .\n' >pytest.ini
  printf 'import torch  # noqa: F401\n' >pkg/__init__.py
  cat >pkg/model.py <<'EOF'
import timm


def build():
    return timm.create_model("vit_tiny_patch16_224", pretrained=False)
EOF
  cat >tests/test_vit.py <<'EOF'
import pytest
import torch

from pkg.model import build
from pytest_compilecache import ModelCase


@pytest.fixture
def vit():
    return ModelCase(build(), example_inputs=(torch.randn(8, 3, 224, 224),))


@pytest.mark.compile_cache
def test_vit(vit):
    ...
EOF
  git add -A && git commit -qm "first" && c0=$(git rev-parse HEAD)
  sed -i 's/^def build/# the serving model\ndef build/' pkg/model.py && git commit -qam "comment the model" && c1=$(git rev-parse HEAD)
  printf 'torch.backends.cuda.matmul.allow_tf32 = True\n' >>pkg/__init__.py && git commit -qam "faster matmuls" && c2=$(git rev-parse HEAD)
  drift_session() {
    echo; echo "===== $*"
    python -m pytest -p no:cacheprovider --compile-cache-check "$@" 2>&1 | grep -v "warm wrote" | tail -45
  }
  drift_session --compile-cache-baseline="$c1" --compile-cache-report="$out/drift-report.json"
  git checkout -q "$c1"
  drift_session --compile-cache-baseline="$c0" --compile-cache-baseline-warm
  git checkout -q "$c2"
  drift_session --compile-cache-baseline="$c1" --compile-cache-baseline-warm
  echo; echo "===== the manifest of c1"
  python -m pytest_compilecache show .compilecache/manifests/*/"$c1".json | head -12
  python - "$c1" <<'EOF'
import glob, json, sys
m = json.load(open(glob.glob(f".compilecache/manifests/*/{sys.argv[1]}.json")[0]))
print("environment", m["environment"])
g = next(iter(m["checks"].values()))["graphs"]["fx_graph:0/0"]
for name, h, value in g["components"]:
    if name.startswith(("system_info", "cuda_matmul", "torch_version")):
        print(f"  [{h[:12]}] {name}: {value[:100]}")
EOF
  cp -r .compilecache/manifests "$out/" 2>/dev/null
}

other_gpu() {
  local layout rc=0
  python benchmarks/gpu_acceptance/other_gpu_pair.py resnet18_train bert_train >"$out/pairs.log" 2>&1
  tail -12 "$out/pairs.log"
  for layout in index pinned; do
    echo "== --compile-cache-warm-on-other-gpu=$layout"
    session "$out/$layout" -k 'test_resnet18_training or (test_bert_mlm_training and not dropout)' \
      --compile-cache-warm-on-other-gpu="$layout" "$@" || rc=$?
  done
  return $rc
}

load() {  # the autotune verdicts alone and under four checks per GPU
  local i
  for i in $(seq "${LOAD_RUNS:-3}"); do
    echo "== alone $i"
    python -m pytest benchmarks/gpu_acceptance/test_max_autotune.py -p no:cacheprovider \
      --compile-cache-check --compile-cache-report="$out/alone-$i.json" "$@" 2>&1 \
      | grep -E "test_max_autotune.py::test_[a-z0-9_]+ +(pass|fail|error) "
    echo "== load $i"
    python -m pytest benchmarks/gpu_acceptance/test_max_autotune.py \
      benchmarks/sharding/test_eight_models.py -p no:cacheprovider -n 4 \
      --compile-cache-jobs-per-gpu=4 --compile-cache-check \
      --compile-cache-report="$out/load-$i.json" "$@" 2>&1 \
      | grep -E "test_max_autotune.py::test_[a-z0-9_]+ +(pass|fail|error) "
  done
}

scenario="set"
case ${1:-} in
  set|pairs|records|hostile|drift|other-gpu|load) scenario=$1; shift ;;
esac
case $scenario in
  set) session "$out" "$@" ;;
  pairs)
    pairs >"$out/pairs.log" 2>&1 &
    session "$out" "$@"; rc=$?
    wait
    tail -30 "$out/pairs.log"
    exit $rc ;;
  records) session "$out" --compile-cache-keep "$@"; rc=$?; records; exit $rc ;;
  hostile) hostile "$@" ;;
  drift) drift ;;
  other-gpu) other_gpu "$@" ;;
  load) load "$@" >"$out/load.log" 2>&1; cat "$out/load.log" ;;
esac
