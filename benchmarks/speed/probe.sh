#!/usr/bin/env bash
# Where a cold phase's start-up goes (device run 8): the imports' cost and whether torch's
# bytecode can be cached here, whether Inductor's compile-worker pool is on the cold
# compile's critical path, and one plugin session's timeline (the report's `timeline`).
#   bash benchmarks/speed/probe.sh        (GPU machine; plugin by PYTHONPATH, results in $OUT)
set -u
. benchmarks/speed/common.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
echo "== imports (twice), then twice with a bytecode cache of its own"
for i in 1 2; do python benchmarks/speed/import_probe.py; done
for i in 1 2; do PYTHONPYCACHEPREFIX=/tmp/probe-pyc python benchmarks/speed/import_probe.py; done
echo "== the compile-worker pool: torch's start, then started before the model is built"
python benchmarks/speed/pool_probe.py
python benchmarks/speed/pool_probe.py early
echo "== one plugin session, resnet18 training"
session r test_resnet18_train
