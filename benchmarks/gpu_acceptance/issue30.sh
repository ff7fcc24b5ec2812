#!/usr/bin/env bash
# Issue 30's GPU run (device tool), in one background session:
#   bash benchmarks/gpu_acceptance/issue30.sh start [pytest args]   then   ... issue30.sh wait [s]
# 1. a hostile repo on the GPU: a conftest points Inductor and Triton at a team cache
#    (the check must put its private dirs back and pass), and a test body that moves
#    Triton's cache dir while it runs (the check must be an error naming TRITON_CACHE_DIR);
# 2. the acceptance set and the eight sharding models, verdicts unchanged.
set -u
res=/tmp/issue30
case "${1:-}" in
  start)
    shift
    mkdir -p "$res" && rm -f "$res/finished"
    setsid bash "$0" run "$@" >"$res/run.log" 2>&1 </dev/null &
    echo $! >"$res/pid" ;;
  run)
    shift
    export PYTHONUNBUFFERED=1
    pip install -q --no-build-isolation --no-deps -e . >"$res/install.log" 2>&1 || { cat "$res/install.log"; exit 1; }
    ptxas=$(python -c "import pathlib, torch; print(pathlib.Path(torch.__file__).parent / 'bin' / 'ptxas')")
    [ -x "$ptxas" ] && export TRITON_PTXAS_PATH=$ptxas
    repo=$res/hostile
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
    # as run.sh: without the pytest11 entry point, load the plugin by name
    plugin=()
    python -c "import importlib.metadata as m, sys; sys.exit(not any(e.name == 'compilecache' for e in m.entry_points(group='pytest11')))" \
      || { export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}; plugin=(-p pytest_compilecache.plugin); }
    (cd "$repo" && python -m pytest "${plugin[@]}" -p no:cacheprovider -rA --compile-cache-check \
      --compile-cache-report="$res/hostile-report.json" test_hostile_gpu.py \
      >"$res/hostile-session.log" 2>&1)
    echo "team-cache files: $(find "$repo/team-cache" -type f 2>/dev/null | wc -l)" >>"$res/hostile-session.log"
    [ -n "${HOSTILE_ONLY:-}" ] && { echo "done" >"$res/finished"; exit 0; }
    OUT=$res bash benchmarks/gpu_acceptance/run.sh benchmarks/sharding/test_eight_models.py "$@"
    gzip -f "$res/gpu-report.json"
    echo "done" >"$res/finished" ;;
  wait)
    deadline=$((SECONDS + ${2:-540}))
    while [ ! -e "$res/finished" ] && kill -0 "$(cat "$res/pid")" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 5; done
    [ -e "$res/finished" ] && echo "finished" || echo "still running"
    cp "$res"/gpu-report.json.gz "$res"/gpu-session.log "$res"/hostile-report.json "$res"/hostile-session.log "$res"/run.log "${OUT:-/tmp/out}/" 2>/dev/null
    grep -E "(pass|fail|error|n/a) " "$res/hostile-session.log" | tail -5
    grep -E "^(test_|benchmarks/).*(pass|fail|error|n/a) " "$res/gpu-session.log" | tail -30
    tail -3 "$res/run.log" ;;
esac
