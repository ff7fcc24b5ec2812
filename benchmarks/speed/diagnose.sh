#!/usr/bin/env bash
# One plugin session over the speed models with every phase profiled (conftest.py), the
# report's stage split printed, and a probe of what importing torch._dynamo touches in CUDA.
#   bash benchmarks/speed/diagnose.sh [-k EXPR]      (GPU machine; results under $OUT)
set -u
out=${OUT:-/tmp/out}
mkdir -p "$out/prof"
pip install -q --no-build-isolation --no-deps -e . >"$out/install.log" 2>&1 || cat "$out/install.log"
if [ -z "${TRITON_PTXAS_PATH:-}" ]; then
  ptxas=$(python -c "import pathlib, torch; print(pathlib.Path(torch.__file__).parent / 'bin' / 'ptxas')")
  [ -x "$ptxas" ] && export TRITON_PTXAS_PATH=$ptxas
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
start=$(date +%s.%N)
SPEED_PROFILE=$out/prof python -m pytest -p pytest_compilecache.plugin benchmarks/speed/test_speed_models.py \
  --compile-cache-check --compile-cache-store=none -p no:cacheprovider -q \
  --compile-cache-report="$out/r.json" "$@" >"$out/session.log" 2>&1
echo "session wall $(python -c "print(round($(date +%s.%N) - $start, 1))") s"
tail -3 "$out/session.log"
python - "$out/r.json" <<'PY'
import json, sys
for c in json.load(open(sys.argv[1]))["checks"]:
    t = c["timings"]
    print(c["nodeid"].split("::")[-1], c["verdict"], c.get("launch"))
    for ph in ("cold", "warm"):
        print("  ", ph, {k[len(ph) + 1:]: v for k, v in sorted(t.items()) if k.startswith(ph + "_")})
PY
python benchmarks/speed/show_profiles.py "$out/prof" 45 >"$out/profiles.txt" 2>&1
if [ -n "${DIAGNOSE_ALSO:-}" ]; then  # the same session unprofiled, for its real split
  start=$(date +%s.%N)
  python -m pytest -p pytest_compilecache.plugin benchmarks/speed/test_speed_models.py \
    --compile-cache-check --compile-cache-store=none -p no:cacheprovider -q \
    --compile-cache-report="$out/r2.json" -k "$DIAGNOSE_ALSO" >"$out/session2.log" 2>&1
  echo "unprofiled session wall $(python -c "print(round($(date +%s.%N) - $start, 1))") s"
  python - "$out/r2.json" <<'PY'
import json, sys
for c in json.load(open(sys.argv[1]))["checks"]:
    t = c["timings"]
    print(c["nodeid"].split("::")[-1], c["verdict"], c.get("launch"), c.get("notes"))
    for ph in ("cold", "warm"):
        print("  ", ph, {k[len(ph) + 1:]: v for k, v in sorted(t.items()) if k.startswith(ph + "_")})
PY
fi
python - <<'PY' >"$out/cuda_probe.txt" 2>&1
import os, traceback, torch
import torch.cuda as tc
seen = []
orig = torch._C._cuda_getDeviceCount
def spy():
    seen.append("".join(traceback.format_stack(limit=14)))
    return orig()
torch._C._cuda_getDeviceCount = spy
import torch._dynamo, torch._inductor.compile_fx
print("calls to _cuda_getDeviceCount during import:", len(seen))
for s in seen[:3]:
    print(s)
print("initialized", torch.cuda.is_initialized())
pid = os.fork()
if pid == 0:
    os._exit(3 if torch._C._cuda_isInBadFork() else 0)
print("child bad fork:", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 3)
PY
head -60 "$out/cuda_probe.txt"
