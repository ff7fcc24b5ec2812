#!/usr/bin/env bash
# Device run 8, second probe: a profiled session (where cold and warm phases spend their
# time, imports included), then two sessions with a bytecode cache for every process
# (PYTHONPYCACHEPREFIX, PYTHONDONTWRITEBYTECODE unset): what imports cost at best.
#   bash benchmarks/speed/probe2.sh      (GPU machine, from the repo root; results in $OUT)
set -u
out=${OUT:-/tmp/out}
if [ -z "${TRITON_PTXAS_PATH:-}" ]; then
  ptxas=$(python -c "import pathlib, torch; print(pathlib.Path(torch.__file__).parent / 'bin' / 'ptxas')")
  [ -x "$ptxas" ] && export TRITON_PTXAS_PATH=$ptxas
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
cd benchmarks/speed
session() {  # NAME [env...]
  local name=$1; shift
  local start; start=$(date +%s.%N)
  env "$@" python -m pytest -p pytest_compilecache.plugin test_speed_models.py::test_resnet18_train \
    -p no:cacheprovider -q --compile-cache-check --compile-cache-store=none \
    --compile-cache-report="$out/$name.json" >"/tmp/$name.log" 2>&1
  local wall; wall=$(python -c "print($(date +%s.%N) - $start)")
  echo "== $name"; tail -1 "/tmp/$name.log"
  python show_report.py "$out/$name.json" "$wall"
}
mkdir -p /tmp/prof
session profiled SPEED_PROFILE=/tmp/prof
python import_share.py /tmp/prof
python show_profiles.py /tmp/prof 40 >"$out/profiles.txt" 2>&1
session pyc1 -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=/tmp/pyc
session pyc2 -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=/tmp/pyc
