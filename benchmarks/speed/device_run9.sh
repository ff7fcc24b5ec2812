#!/usr/bin/env bash
# Device run 9 (issue 29, item 5): main after the speed branch's merge, on one card, in
# a copy of the checkout that later device calls leave alone:
#   bash benchmarks/speed/device_run9.sh start     then     bash benchmarks/speed/device_run9.sh wait
# 1. `run.py --rounds 3` as the device image is (PYTHONDONTWRITEBYTECODE=1, torch ships no
#    .pyc): round 0 on an empty launcher state, rounds 1-2 with the state kept;
# 2. one more round as a typical install is (pip writes bytecode; here compileall of the
#    site-packages the processes import, and PYTHONDONTWRITEBYTECODE unset), where the
#    hand-written pair no longer compiles torch's sources in each of its processes.
set -u
res=/tmp/speed
case "${1:-}" in
  start)
    rm -rf /tmp/tree "$res" && mkdir -p "$res" && cp -r . /tmp/tree && cd /tmp/tree || exit 1
    pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >"$res/wheels.log" 2>&1
    setsid bash benchmarks/speed/device_run9.sh body >"$res/body.log" 2>&1 </dev/null &
    echo $! >"$res/body.pid" ;;
  body)
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    models=resnet18_train,resnet152_ro
    bash benchmarks/speed/run.sh start --rounds 3 --launchers preloaded --models "$models"
    while kill -0 "$(cat $res/pid)" 2>/dev/null; do sleep 5; done
    cp "$res/run.log" "$res/run-image.log"; cp "$res/speed.json" "$res/speed-image.json"
    site=$(python -c "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))")
    for p in torch torchvision triton _pytest pytest pluggy xdist execnet filelock sympy \
             jinja2 networkx fsspec; do
      [ -d "$site/$p" ] && echo "$site/$p"
    done | xargs python -m compileall -q -j 16 >"$res/compileall.log" 2>&1
    echo "compileall rc $? ($(du -sh "$site/torch" | cut -f1) torch)" >>"$res/compileall.log"
    export TRITON_PTXAS_PATH=${TRITON_PTXAS_PATH:-$(python -c "import pathlib, torch; print(pathlib.Path(torch.__file__).parent / 'bin' / 'ptxas')")}
    python -c "import importlib.metadata as m, sys; sys.exit(not any(e.name == 'compilecache' for e in m.entry_points(group='pytest11')))" \
      || { export PYTHONPATH=$PWD:$PYTHONPATH; export SPEED_PLUGIN_BY_NAME=1; }
    env -u PYTHONDONTWRITEBYTECODE \
      python benchmarks/speed/run.py --rounds 1 --first-round 3 --launchers preloaded \
      --models "$models" --out "$res/bytecode" >"$res/run-bytecode.log" 2>&1
    echo finished >"$res/done" ;;
  wait)
    deadline=$((SECONDS + ${2:-540}))
    while [ ! -e "$res/done" ] && [ $SECONDS -lt $deadline ]; do sleep 5; done
    [ -e "$res/done" ] && echo finished || echo "still running"
    cp "$res"/run-image.log "$res"/speed-image.json "$res"/run.log "$res"/speed.json \
       "$res"/run-bytecode.log "$res"/bytecode/speed.json "$res"/compileall.log \
       "$res"/body.log "${OUT:-/tmp/out}/" 2>/dev/null
    [ -e "$res/bytecode/speed.json" ] && cp "$res/bytecode/speed.json" "${OUT:-/tmp/out}/speed-bytecode.json"
    tail -25 "$res/run.log"; tail -12 "$res/run-bytecode.log" 2>/dev/null ;;
esac
