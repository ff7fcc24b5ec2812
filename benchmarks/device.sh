#!/usr/bin/env bash
# The device-run plumbing every GPU benchmark shares (run from the repository root):
#
#   bash benchmarks/device.sh run COMMAND...          prepare, then run COMMAND here
#   bash benchmarks/device.sh start NAME COMMAND...   prepare, then run COMMAND in its own
#                                                     session, in the background
#   bash benchmarks/device.sh wait NAME [SECONDS]     wait for it (default 540 s), then
#                                                     copy its results to $OUT
#
# `start`/`wait` are for the device tool, whose calls end after 10 minutes: `start`
# returns at once, and `wait` is called again until it prints "finished". `start` runs
# COMMAND in a copy of the checkout (/tmp/bench/NAME/tree), since a later call copies
# the working tree again over the one it ran in, with OUT=/tmp/bench/NAME/out; `wait`
# packs that folder into $OUT/NAME-results.tar.gz beside $OUT/NAME-run.log (the tool
# brings back at most 8 files) and prints the log's end.
#
# Prepare (once per process tree; DEVICE_PREPARED=1 marks it done):
#   1. wheels carried in .whl/ (the machine has no network) installed into /tmp/site,
#      which goes first on PYTHONPATH;
#   2. Debian packages carried in .debs/ (e.g. redis-server redis-tools libjemalloc2
#      liblzf1, for the Redis path) unpacked into /tmp/debs, on PATH and LD_LIBRARY_PATH;
#   3. TRITON_PTXAS_PATH set to torch's own ptxas: torch 2.11 sets it lazily, on some
#      compile paths only, and the ptxas version is part of Triton's key, so a production
#      start sets it up front (docs/gpu-results.md). DEVICE_UNPINNED_PTXAS=1 leaves it
#      unset, to see the miss;
#   4. the plugin installed from this checkout (`pip install -e .`, no dependencies);
#      DEVICE_NO_INSTALL=1 skips that (speed/run.py --trees). Without its pytest11 entry
#      point the plugin is loaded by name: this checkout on PYTHONPATH and
#      PYTEST_PLUGINS=pytest_compilecache.plugin, which the phase processes inherit.
set -u

device_prepare() {
  [ -n "${DEVICE_PREPARED:-}" ] && return 0
  local log=${1:-/dev/null}
  export PYTHONUNBUFFERED=1
  if compgen -G ".whl/*.whl" >/dev/null; then
    python -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >>"$log" 2>&1 \
      || echo "device.sh: installing .whl/*.whl into /tmp/site failed (log: $log)" >&2
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  fi
  if compgen -G ".debs/*.deb" >/dev/null; then
    local deb
    mkdir -p /tmp/debs
    for deb in .debs/*.deb; do dpkg -x "$deb" /tmp/debs; done
    export PATH=/tmp/debs/usr/bin:$PATH
    export LD_LIBRARY_PATH=/tmp/debs/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
  if [ -z "${TRITON_PTXAS_PATH:-}" ] && [ -z "${DEVICE_UNPINNED_PTXAS:-}" ]; then
    local ptxas
    ptxas=$(python -c "import pathlib, torch; print(pathlib.Path(torch.__file__).parent / 'bin' / 'ptxas')" 2>/dev/null)
    [ -n "$ptxas" ] && [ -x "$ptxas" ] && export TRITON_PTXAS_PATH=$ptxas
  fi
  if [ -z "${DEVICE_NO_INSTALL:-}" ]; then
    python -m pip install -q --no-build-isolation --no-deps -e . >>"$log" 2>&1 \
      || echo "device.sh: pip install -e . failed (log: $log); loading the plugin by name" >&2
  fi
  if ! python -c "import importlib.metadata as m, sys; sys.exit(not any(e.name == 'compilecache' for e in m.entry_points(group='pytest11')))"; then
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
    export PYTEST_PLUGINS=pytest_compilecache.plugin${PYTEST_PLUGINS:+,$PYTEST_PLUGINS}
  fi
  export DEVICE_PREPARED=1
  { nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no GPU"
    python -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)" 2>/dev/null
    echo "TRITON_PTXAS_PATH=${TRITON_PTXAS_PATH:-}"; } >&2
}

device_main() {
  local verb=${1:-} name res
  case $verb in
    run)
      shift
      device_prepare "${TMPDIR:-/tmp}/device-prepare.log"
      exec "$@" ;;
    start)
      name=${2:?usage: device.sh start NAME COMMAND...}; shift 2
      res=/tmp/bench/$name
      if [ -e "$res/pid" ] && kill -0 "$(cat "$res/pid")" 2>/dev/null; then
        echo "device.sh: $name is still running (pid $(cat "$res/pid")): wait for it first" >&2
        return 1
      fi
      rm -rf "$res" && mkdir -p "$res/out" && cp -a . "$res/tree" && cd "$res/tree" || return 1
      device_prepare "$res/prepare.log" 2>"$res/run.log"
      # shellcheck disable=SC2016  # expanded by the inner shell: $0 is $res, "$@" the command
      OUT=$res/out setsid bash -c '"$@"; echo $? >"$0/rc"' "$res" "$@" >>"$res/run.log" 2>&1 </dev/null &
      echo $! >"$res/pid"
      echo "started $name (pid $!); then: bash benchmarks/device.sh wait $name" ;;
    wait)
      name=${2:?usage: device.sh wait NAME [SECONDS]}
      res=/tmp/bench/$name
      [ -e "$res/pid" ] || { echo "device.sh: nothing started as $name" >&2; return 1; }
      local deadline=$((SECONDS + ${3:-540})) out=${OUT:-/tmp/out}
      while [ ! -e "$res/rc" ] && kill -0 "$(cat "$res/pid")" 2>/dev/null && [ $SECONDS -lt $deadline ]; do
        sleep 5
      done
      if [ -e "$res/rc" ]; then echo "finished, exit status $(cat "$res/rc")"
      elif kill -0 "$(cat "$res/pid")" 2>/dev/null; then echo "still running: wait again"
      else echo "ended without an exit status (killed?)"; fi
      mkdir -p "$out"
      cp "$res/run.log" "$out/$name-run.log"
      tar -czf "$out/$name-results.tar.gz" -C "$res/out" .
      tail -n "${DEVICE_TAIL:-40}" "$res/run.log" ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "${BASH_SOURCE[0]}" ;;
    *) awk 'NR > 1 && !/^#/ { exit } NR > 1' "${BASH_SOURCE[0]}" >&2; return 2 ;;
  esac
}

# sourced (`. benchmarks/device.sh`): device_prepare alone
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  device_main "$@"
fi
