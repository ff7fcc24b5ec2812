#!/usr/bin/env bash
# Issue 37's two-GPU acceptance (device tool, a 2-GPU kind): the plugin-free pair
# (other_gpu_pair.py: cold on GPU 0; GPU 1 over its cache with both GPUs visible, alone
# as cuda:0, and fresh), then resnet18 training and BERT through the plugin with
# --compile-cache-warm-on-other-gpu=index and =pinned, then cost.py's shared-variants
# session on resnet18 inference; one after another, in the background:
#   bash benchmarks/gpu_acceptance/other_gpu.sh start   then   ... other_gpu.sh wait [s]
set -u
here=$(cd "$(dirname "$0")" && pwd)
res=/tmp/gpu-acceptance
case "${1:-}" in
  cost)  # the cost benchmark alone
    mkdir -p "$res"
    ptxas=$(python -c "import pathlib, torch; print(pathlib.Path(torch.__file__).parent / 'bin' / 'ptxas')")
    [ -x "$ptxas" ] && export TRITON_PTXAS_PATH=$ptxas
    OUT=$res/cost python "$here/../false_hits/cost.py" "$here/../false_hits" >"$res/cost.log" 2>&1
    tail -4 "$res/cost.log" ;;
  start)
    mkdir -p "$res"
    if ls .whl/*.whl >/dev/null 2>&1; then  # the device has no network: carried wheels
      pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >"$res/wheels.log" 2>&1
      export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    fi
    ptxas=$(python -c "import pathlib, torch; print(pathlib.Path(torch.__file__).parent / 'bin' / 'ptxas')")
    [ -x "$ptxas" ] && export TRITON_PTXAS_PATH=$ptxas
    setsid bash -c "
      python '$here/other_gpu_pair.py' resnet18_train bert_train >'$res/pairs.log' 2>&1
      for layout in index pinned; do
        OUT=$res/\$layout bash '$here/run.sh' -k 'test_resnet18_training or (test_bert_mlm_training and not dropout)' \
          --compile-cache-warm-on-other-gpu=\$layout >'$res/'\$layout.log 2>&1
      done
      OUT=$res/cost python '$here/../false_hits/cost.py' '$here/../false_hits' >'$res/cost.log' 2>&1
      echo done >'$res/done'
    " </dev/null >"$res/run.log" 2>&1 &
    echo started ;;
  wait)
    deadline=$((SECONDS + ${2:-540}))
    while [ ! -e "$res/done" ] && [ $SECONDS -lt $deadline ]; do sleep 5; done
    [ -e "$res/done" ] && echo finished || echo "still running"
    out=${OUT:-/tmp/out}
    mkdir -p "$out"
    cp -r "$res"/. "$out/" 2>/dev/null
    cat "$res/pairs.log" 2>/dev/null | tail -12
    for layout in index pinned; do
      grep -E "^(test_|benchmarks/).*(pass|fail|error) " "$res/$layout/gpu-session.log" 2>/dev/null | tail -4
    done
    tail -4 "$res/cost.log" 2>/dev/null ;;
esac
