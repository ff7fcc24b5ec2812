# Sourced by the probes (from the repo root): TRITON_PTXAS_PATH as
# benchmarks/gpu_acceptance/run.sh sets it, the plugin by PYTHONPATH, `out`, and
# `session NAME TEST [VAR=VALUE | -u VAR ...]`: one plugin session in benchmarks/speed whose
# report lands in $out/NAME.json and whose split is printed (show_report.py).
out=${OUT:-/tmp/out}
if [ -z "${TRITON_PTXAS_PATH:-}" ]; then
  ptxas=$(python -c "import pathlib, torch; print(pathlib.Path(torch.__file__).parent / 'bin' / 'ptxas')")
  [ -x "$ptxas" ] && export TRITON_PTXAS_PATH=$ptxas
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}

session() {
  local name=$1 test=$2; shift 2
  local start; start=$(date +%s.%N)
  (cd benchmarks/speed && env "$@" python -m pytest -p pytest_compilecache.plugin \
    "test_speed_models.py::$test" -p no:cacheprovider -q --compile-cache-check \
    --compile-cache-store=none --compile-cache-report="$out/$name.json" >"/tmp/$name.log" 2>&1)
  local wall; wall=$(python -c "print($(date +%s.%N) - $start)")
  echo "== $name"; tail -1 "/tmp/$name.log"
  python benchmarks/speed/show_report.py "$out/$name.json" "$wall"
}
