#!/usr/bin/env bash
# Device run 8, second probe: a profiled session (where cold and warm phases spend their
# time, imports included), then two sessions with a bytecode cache for every process
# (PYTHONPYCACHEPREFIX, PYTHONDONTWRITEBYTECODE unset): what imports cost at best.
#   bash benchmarks/speed/probe2.sh      (GPU machine, from the repo root; results in $OUT)
set -u
. benchmarks/speed/common.sh
mkdir -p /tmp/prof
session profiled test_resnet18_train SPEED_PROFILE=/tmp/prof
python benchmarks/speed/import_share.py /tmp/prof
python benchmarks/speed/show_profiles.py /tmp/prof 40 >"$out/profiles.txt" 2>&1
session pyc1 test_resnet18_train -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=/tmp/pyc
session pyc2 test_resnet18_train -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=/tmp/pyc
