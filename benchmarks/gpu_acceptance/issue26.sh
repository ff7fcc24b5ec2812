#!/usr/bin/env bash
# Issue 26's GPU acceptance in one background session (device tool):
#   bash benchmarks/gpu_acceptance/issue26.sh start [pytest args]   then   ... issue26.sh wait [s]
# 1. the acceptance set (this folder, with the random-draw and max-autotune models) and
#    the eight models of benchmarks/sharding, roots kept (the MLP's phase records);
# 2. plugin-free pairs under max-autotune (autotune_pair.py), for the side-by-side;
# 3. the MLP's recorded cold/warm phases, for tests/data.
set -u
res=/tmp/issue26
case "${1:-}" in
  start)
    shift
    mkdir -p "$res"
    setsid bash "$0" run "$@" >"$res/run.log" 2>&1 </dev/null &
    echo $! >"$res/pid" ;;
  run)
    shift
    export PYTHONUNBUFFERED=1
    ptxas=$(python -c "import pathlib, torch; print(pathlib.Path(torch.__file__).parent / 'bin' / 'ptxas')")
    [ -x "$ptxas" ] && export TRITON_PTXAS_PATH=$ptxas
    (  # the pairs alongside the checks: GPU contention moves timings, not counts
      for args in "mlp max-autotune-no-cudagraphs" "resnet18 max-autotune" \
                  "mlp max-autotune-no-cudagraphs --delete-best-config"; do
        # shellcheck disable=SC2086
        python benchmarks/gpu_acceptance/autotune_pair.py $args | tail -1 >>"$res/pairs.jsonl"
      done ) &
    OUT=$res bash benchmarks/gpu_acceptance/run.sh benchmarks/sharding/test_eight_models.py \
      --compile-cache-keep "$@"
    wait
    python - "$res" <<'PY'
import json, shutil, sys, tarfile
from pathlib import Path
res = Path(sys.argv[1])
report = json.loads((res / "gpu-report.json").read_text())
with tarfile.open(res / "records.tar.gz", "w:gz") as tar:
    for c in report["checks"]:
        if any(k in c["nodeid"] for k in ("max_autotune", "autotune_results_deleted", "training")):
            root = Path(c.get("cache_root") or "/nonexistent") / "phases"
            for ph in ("cold", "warm"):
                if (root / f"{ph}.json").exists():
                    tar.add(root / f"{ph}.json", arcname=f"{c['nodeid'].split('::')[-1]}/{ph}.json")
PY
    gzip -f "$res/gpu-report.json"
    echo "done" >"$res/finished" ;;
  wait)
    deadline=$((SECONDS + ${2:-540}))
    while [ ! -e "$res/finished" ] && kill -0 "$(cat "$res/pid")" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 5; done
    [ -e "$res/finished" ] && echo "finished" || echo "still running"
    cp "$res"/gpu-report.json.gz "$res"/gpu-session.log "$res"/pairs.jsonl "$res"/records.tar.gz "$res"/run.log "${OUT:-/tmp/out}/" 2>/dev/null
    grep -E "^(test_|benchmarks/).*(pass|fail|error|n/a) " "$res/gpu-session.log" | tail -30
    tail -5 "$res/run.log" ;;
esac
