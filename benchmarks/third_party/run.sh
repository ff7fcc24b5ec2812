#!/usr/bin/env bash
# Third-party acceptance: real suites' tests, unchanged, checked by the plugin
# (a marker added from a plugin file) beside a plugin-free "plain pair" over one cache dir.
#
#   bash benchmarks/third_party/run.sh [options] [suite...]      # suites: kornia pyg (default: both)
#
#   --plugin DIR   the plugin checkout to install and check with (default: this repository)
#   --venv DIR     the venv to create or reuse (default /tmp/thirdparty/venv)
#   --src DIR      where export_sources.sh put the suites' files (default /tmp/thirdparty)
#   --out DIR      where logs and JSON go (default /tmp/thirdparty/out-<time>)
#   --plugin-only  run only the plugin sessions;  --pair-only: only the plain pairs
#   --no-install   use the venv as it is
# Exit status: 0 when every plugin verdict equals its plain pair's, 1 otherwise.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=benchmarks/third_party/suites.sh disable=SC1091
. "$here/suites.sh"
plugin=$(cd "$here/../.." && pwd)
venv=/tmp/thirdparty/venv; src=/tmp/thirdparty; out=""; do_plugin=1; do_pair=1; install=1
suites=()
while [ $# -gt 0 ]; do
  case $1 in
    --plugin) plugin=$(cd "$2" && pwd); shift ;;
    --venv) venv=$2; shift ;;
    --src) src=$2; shift ;;
    --out) out=$2; shift ;;
    --plugin-only) do_pair=0 ;;
    --pair-only) do_plugin=0 ;;
    --no-install) install=0 ;;
    -h|--help) sed -n 2,14p "$0"; exit 0 ;;
    kornia|pyg) suites+=("$1") ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
[ ${#suites[@]} -eq 0 ] && read -r -a suites <<< "$ALL_SUITES"
out=${out:-/tmp/thirdparty/out-$(date -u +%Y%m%dT%H%M%S)}
mkdir -p "$out"
py=$venv/bin/python
log() { echo "[third_party $(date -u +%H:%M:%S)] $*"; }

# 1. the venv -----------------------------------------------------------------------
if [ $install = 1 ]; then
  t0=$(date +%s)
  [ -x "$py" ] || python3 -m venv "$venv" || exit 2
  if ! "$py" -c 'import torch, sys; sys.exit(torch.__version__.split("+")[0] != "2.13.0")' 2>/dev/null; then
    log "installing torch 2.13.0 (CPU index, else the package index)"
    "$py" -m pip install -q --timeout 15 --retries 0 torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \
      || "$py" -m pip install -q torch==2.13.0 || exit 2
  fi
  log "installing the plugin from $plugin, pytest, numpy, $KORNIA_PIP, $PYG_PIP"
  "$py" -m pip install -q -e "${plugin}[xdist]" pytest numpy "$KORNIA_PIP" "$PYG_PIP" 2>&1 \
    | grep -v "^WARNING: Location" || true
  log "venv ready in $(( $(date +%s) - t0 )) s"
fi
"$py" - <<'PY' | tee "$out/versions.txt"
import importlib.metadata as md, pytest_compilecache, os
for d in ("torch", "pytest", "pytest-compilecache", "kornia", "kornia_rs", "torch_geometric", "numpy", "pytest-xdist"):
    try:
        print(f"{d} {md.version(d)}")
    except md.PackageNotFoundError:
        print(f"{d} (not installed)")
print("plugin from", os.path.dirname(os.path.dirname(pytest_compilecache.__file__)))
PY
plugin_sha=$(git -C "$plugin" rev-parse --short HEAD 2>/dev/null || echo unknown)
plugin_dirty=$(git -C "$plugin" status --porcelain -- pytest_compilecache pyproject.toml 2>/dev/null | grep -qv '^??' && echo "+dirty")
plugin_code=$(git -C "$plugin" log -1 --format=%h -- pytest_compilecache pyproject.toml 2>/dev/null || echo unknown)
log "plugin checkout $plugin at $plugin_sha (plugin code last changed in $plugin_code$plugin_dirty)"

# 2./3./4. per suite --------------------------------------------------------------------
n=0
for suite in "${suites[@]}"; do
  case $suite in
    kornia) commit=$KORNIA_COMMIT; envstr=$KORNIA_ENV; tests=$KORNIA_TESTS ;;
    pyg) commit=$PYG_COMMIT; envstr=$PYG_ENV; tests=$PYG_TESTS ;;
  esac
  dir=$src/$suite
  if [ ! -f "$dir/SOURCE_COMMIT" ]; then
    echo "$dir: no exported sources; run: bash $here/export_sources.sh $suite <git dir with $commit>" >&2
    exit 2
  fi
  got=$(cat "$dir/SOURCE_COMMIT")
  [ "$got" = "$commit" ] || log "WARNING: $dir is $got, suites.sh pins $commit"
  log "$suite: tests from $got"
  read -r -a ids <<< "$tests"
  read -r -a envs <<< "$envstr"

  if [ $do_plugin = 1 ]; then
    log "$suite: plugin session: ${ids[*]}"
    t0=$(date +%s.%N)
    (cd "$dir" && env "${envs[@]}" PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" PYTEST_PLUGINS=thirdparty_mark \
       THIRDPARTY_MARK="$tests" "$py" -m pytest -p no:cacheprovider "${ids[@]}" \
       --compile-cache-check --compile-cache-report="$out/$suite.plugin.json" --color=no) \
       > "$out/$suite.plugin.log" 2>&1
    rc=$?
    printf '%.1f' "$(echo "$(date +%s.%N) - $t0" | bc)" > "$out/$suite.plugin.wall"
    log "$suite: plugin session exit $rc in $(cat "$out/$suite.plugin.wall") s (log $out/$suite.plugin.log)"
    grep -E "^compile-cache check|^  why:|^  - |^  outputs:|ERROR|FAILED|^E  " "$out/$suite.plugin.log" | sed 's/\x1b\[[0-9;]*m//g' | head -40
  fi

  if [ $do_pair = 1 ]; then
    for id in "${ids[@]}"; do
      n=$((n + 1))
      cache=$(mktemp -d /tmp/thirdparty/pair-cache-XXXXXX)
      log "$suite: plain pair $id (cache $cache)"
      declare -A wall=()
      for phase in cold warm; do
        [ $phase = warm ] && (cd "$cache" && find . -type f -printf '%p %s %T@\n' | sort) > "$out/pair-$n.before-warm"
        t0=$(date +%s.%N)
        (cd "$dir" && env "${envs[@]}" TORCHINDUCTOR_CACHE_DIR="$cache/inductor" TRITON_CACHE_DIR="$cache/triton" \
           TORCHINDUCTOR_FX_GRAPH_CACHE=1 PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" \
           PYTEST_PLUGINS=thirdparty_counters THIRDPARTY_COUNTERS="$out/counters-$n.$phase.json" \
           "$py" -m pytest -p no:compilecache -p no:cacheprovider --color=no "$id") > "$out/pair-$n.$phase.log" 2>&1
        prc=$?
        wall[$phase]=$(printf '%.1f' "$(echo "$(date +%s.%N) - $t0" | bc)")
        log "  $phase: exit $prc in ${wall[$phase]} s: $(grep -E '(passed|failed|error|skipped)' "$out/pair-$n.$phase.log" | tail -1)"
      done
      (cd "$cache" && find . -type f -printf '%p %s %T@\n' | sort) > "$out/pair-$n.after-warm"
      # added or changed by the warm process; inductor's lock files (empty, touched by some
      # filelock versions whenever an entry is read) are not cache entries
      comm -13 "$out/pair-$n.before-warm" "$out/pair-$n.after-warm" | grep -v -E '/locks/|\.lock ' \
        > "$out/pair-$n.written-warm"
      written=$(wc -l < "$out/pair-$n.written-warm")
      "$py" - "$out" "$n" "$id" "$suite" "$written" "${wall[cold]}" "${wall[warm]}" <<'PY'
import json, os, sys
out, n, nodeid, suite, written, cw, ww = sys.argv[1:]
def load(phase):
    try:
        with open(os.path.join(out, f"counters-{n}.{phase}.json")) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        return {"outcomes": {}, "error": repr(e)}
json.dump({"nodeid": nodeid, "suite": suite, "cold": load("cold"), "warm": load("warm"),
           "warm_files_written": int(written),
           "warm_written": [l.split(" ")[0] for l in open(os.path.join(out, f"pair-{n}.written-warm"))][:20],
           "cold_wall_s": float(cw), "warm_wall_s": float(ww)},
          open(os.path.join(out, f"pair-{n}.json"), "w"), indent=1)
PY
      rm -rf "$cache"
    done
  fi
done

log "plugin $plugin at $plugin_sha (code $plugin_code$plugin_dirty); suites: kornia@${KORNIA_COMMIT:0:9} pyg@${PYG_COMMIT:0:9}; out $out"
"$py" "$here/summarize.py" "$out" | tee "$out/summary.txt"
exit "${PIPESTATUS[0]}"
