#!/usr/bin/env bash
# Where a cold phase's start-up goes (device run 8): the imports' cost and whether torch's
# bytecode can be cached here, whether Inductor's compile-worker pool is on the cold
# compile's critical path, and one plugin session's timeline (the report's `timeline`).
#   bash benchmarks/speed/probe.sh        (GPU machine; plugin by PYTHONPATH, results in $OUT)
set -u
out=${OUT:-/tmp/out}
if [ -z "${TRITON_PTXAS_PATH:-}" ]; then  # as benchmarks/gpu_acceptance/run.sh
  ptxas=$(python -c "import pathlib, torch; print(pathlib.Path(torch.__file__).parent / 'bin' / 'ptxas')")
  [ -x "$ptxas" ] && export TRITON_PTXAS_PATH=$ptxas
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
echo "== imports (twice), then twice with a bytecode cache of its own"
for i in 1 2; do python benchmarks/speed/import_probe.py; done
for i in 1 2; do PYTHONPYCACHEPREFIX=/tmp/probe-pyc python benchmarks/speed/import_probe.py; done
echo "== the compile-worker pool: torch's start, then started before the model is built"
python benchmarks/speed/pool_probe.py
python benchmarks/speed/pool_probe.py early
echo "== one plugin session, resnet18 training"
cd benchmarks/speed
start=$(date +%s.%N)
python -m pytest -p pytest_compilecache.plugin "test_speed_models.py::test_resnet18_train" \
  -p no:cacheprovider -q --compile-cache-check --compile-cache-store=none \
  --compile-cache-report="$out/r.json" >"$out/session.log" 2>&1
echo "session wall $(python -c "print(round($(date +%s.%N) - $start, 1))") s"
tail -3 "$out/session.log"
python - "$out/r.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("timeline", d.get("timeline"))
for c in d["checks"]:
    print(c["verdict"], c.get("launch"), c.get("notes"))
    print({k: v for k, v in c["timings"].items() if "detail" not in k})
PY
