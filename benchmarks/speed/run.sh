#!/usr/bin/env bash
# The speed benchmark on the GPU machine (device tool), in its own session so that it
# outlives one call's 10-minute limit:
#   bash benchmarks/speed/run.sh start [run.py args]   then   bash benchmarks/speed/run.sh wait [S]
set -u
res=/tmp/speed
case "${1:-}" in
  start)
    shift
    mkdir -p "$res"
    case " $* " in
      *" --trees "*) ;;  # each tree's plugin by PYTHONPATH and name: nothing installed
      *) pip install -q --no-build-isolation --no-deps -e . >"$res/install.log" 2>&1 || cat "$res/install.log" ;;
    esac
    if [ -z "${TRITON_PTXAS_PATH:-}" ]; then  # as benchmarks/gpu_acceptance/run.sh
      ptxas=$(python -c "import pathlib, torch; print(pathlib.Path(torch.__file__).parent / 'bin' / 'ptxas')")
      [ -x "$ptxas" ] && export TRITON_PTXAS_PATH=$ptxas
    fi
    python -c "import importlib.metadata as m, sys; sys.exit(not any(e.name == 'compilecache' for e in m.entry_points(group='pytest11')))" \
      || { export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}; export SPEED_PLUGIN_BY_NAME=1; }
    nvidia-smi --query-gpu=name --format=csv,noheader
    OUT=$res setsid python benchmarks/speed/run.py --out "$res" "$@" >"$res/run.log" 2>&1 </dev/null &
    echo $! >"$res/pid" ;;
  wait)
    deadline=$((SECONDS + ${2:-540}))
    while kill -0 "$(cat "$res/pid")" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 5; done
    kill -0 "$(cat "$res/pid")" 2>/dev/null && echo "still running" || echo "finished"
    # what comes back from the device is at most 8 files: speed.json holds every report's split
    cp "$res"/speed.json "$res"/run.log "$res"/speed.log "${OUT:-/tmp/out}/" 2>/dev/null
    cat "$res/run.log" ;;
esac
