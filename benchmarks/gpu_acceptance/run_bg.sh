#!/usr/bin/env bash
# Device-tool helper: start the GPU acceptance run (run.sh, any extra pytest args) in
# its own session, so it outlives one call's 10-minute limit; `wait` collects it.
#   bash benchmarks/gpu_acceptance/run_bg.sh start ARGS...   then   ... run_bg.sh wait
set -u
res=/tmp/gpu-acceptance
case "${1:-}" in
  start)
    shift
    mkdir -p "$res"
    OUT=$res setsid bash benchmarks/gpu_acceptance/run.sh "$@" >"$res/run.log" 2>&1 </dev/null &
    echo $! >"$res/pid" ;;
  wait)
    deadline=$((SECONDS + ${2:-540}))
    while kill -0 "$(cat "$res/pid")" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 5; done
    kill -0 "$(cat "$res/pid")" 2>/dev/null && echo "still running" || echo "finished"
    cp "$res"/*.json "$res"/*.log "${OUT:-/tmp/out}/" 2>/dev/null
    grep -E "^(test_|benchmarks/).*(pass|fail|error) " "$res/gpu-session.log" | tail -20 ;;
esac
