#!/usr/bin/env bash
# Issue 36's GPU acceptance (device tool): the whole set (with test_amp_training.py's
# fp16 GradScaler, bf16 AdamW and fp32 SGD-momentum bodies) through run_bg.sh, and the
# same three bodies as plugin-free pairs (amp_plain_pair.py) alongside:
#   bash benchmarks/gpu_acceptance/issue36.sh start [pytest args]   then   ... issue36.sh wait [s]
set -u
here=$(dirname "$0")
pairs=/tmp/gpu-acceptance/pairs.log
case "${1:-}" in
  start)
    shift
    mkdir -p "$(dirname "$pairs")"
    ptxas=$(python -c "import pathlib, torch; print(pathlib.Path(torch.__file__).parent / 'bin' / 'ptxas')")
    [ -x "$ptxas" ] && export TRITON_PTXAS_PATH=$ptxas
    setsid python "$here/amp_plain_pair.py" >"$pairs" 2>&1 </dev/null &
    bash "$here/run_bg.sh" start "$@" ;;
  wait)
    bash "$here/run_bg.sh" wait "${2:-540}"
    cp "$pairs" "${OUT:-/tmp/out}/" 2>/dev/null
    tail -30 "$pairs" ;;
esac
