#!/usr/bin/env bash
# Issue 36's GPU acceptance in one background session (device tool):
#   bash benchmarks/gpu_acceptance/issue36.sh start [pytest args]   then   ... issue36.sh wait [s]
# 1. the whole acceptance set (this folder, with test_amp_training.py's fp16 GradScaler,
#    bf16 AdamW and fp32 SGD-momentum bodies) under the plugin;
# 2. alongside, the same three bodies as plugin-free pairs of processes over one cache
#    dir (amp_plain_pair.py), for the side-by-side.
set -u
res=/tmp/issue36
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
    python benchmarks/gpu_acceptance/amp_plain_pair.py >"$res/pairs.log" 2>&1 &
    OUT=$res bash benchmarks/gpu_acceptance/run.sh "$@"
    wait
    echo "done" >"$res/finished" ;;
  wait)
    deadline=$((SECONDS + ${2:-540}))
    while [ ! -e "$res/finished" ] && kill -0 "$(cat "$res/pid")" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 5; done
    [ -e "$res/finished" ] && echo "finished" || echo "still running"
    cp "$res"/gpu-report.json "$res"/gpu-session.log "$res"/pairs.log "$res"/run.log "${OUT:-/tmp/out}/" 2>/dev/null
    grep -E "^(test_|benchmarks/).*(pass|fail|error|n/a) " "$res/gpu-session.log" | tail -30
    tail -30 "$res/pairs.log" ;;
esac
