#!/usr/bin/env bash
# Device run 8, third probe: the changed plugin, two sessions of resnet18 training (the
# first on an empty launcher state: it writes the preload list and the interpreters'
# bytecode; the second reads them), then resnet152 reduce-overhead once.
#   bash benchmarks/speed/probe3.sh      (GPU machine, from the repo root; results in $OUT)
set -u
. benchmarks/speed/common.sh
session first test_resnet18_train
du -sh ~/.cache/pytest-compilecache/bytecode; head -c 600 ~/.cache/pytest-compilecache/preload/*.json; echo
session second test_resnet18_train
session ro test_resnet152_ro
