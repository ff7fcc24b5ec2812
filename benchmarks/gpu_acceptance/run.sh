#!/usr/bin/env bash
# The GPU acceptance run (device tool): install, run the set, keep the report.
set -u
out=${OUT:-/tmp/out}
mkdir -p "$out"
pip install -q --no-build-isolation --no-deps -e . >"$out/install.log" 2>&1 || { cat "$out/install.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
# torch 2.11 sets TRITON_PTXAS_PATH lazily, on some compile paths only, and the ptxas
# version is in Triton's key: fix it up front as a production start should (README).
# RUN_UNPINNED_PTXAS=1 leaves it unset to see the miss.
if [ -z "${TRITON_PTXAS_PATH:-}" ] && [ -z "${RUN_UNPINNED_PTXAS:-}" ]; then
  ptxas=$(python -c "import pathlib, torch; print(pathlib.Path(torch.__file__).parent / 'bin' / 'ptxas')")
  [ -x "$ptxas" ] && export TRITON_PTXAS_PATH=$ptxas
fi
# without the pytest11 entry point (an install that failed), load the plugin by name
plugin=()
python -c "import importlib.metadata as m, sys; sys.exit(not any(e.name == 'compilecache' for e in m.entry_points(group='pytest11')))" \
  || { export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}; plugin=(-p pytest_compilecache.plugin); }
python -m pytest "${plugin[@]}" benchmarks/gpu_acceptance -p no:cacheprovider -rA --compile-cache-check \
  --compile-cache-report="$out/gpu-report.json" "$@" 2>&1 | tee "$out/gpu-session.log"
