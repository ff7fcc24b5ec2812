#!/usr/bin/env bash
# The Action's self-test workflow, run on this host by act (no Docker, no GitHub):
# the checks run with the Python given (the venv .ci/run made). act fetches every remote
# action a composite names, even behind `if: !env.ACT`, so each one the Action uses is
# replaced by an empty local stand-in (the steps are skipped under act anyway).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-$(command -v python)}
stub=$(mktemp -d)
trap 'rm -rf "$stub"' EXIT
noop='name: stand-in
description: an empty stand-in for a remote action under act
runs:
  using: composite
  steps: []'
repl=()
while read -r repo ref; do
  dir=$stub/${repo//\//_}-$ref
  mkdir -p "$dir/restore" "$dir/save"
  for d in "$dir" "$dir/restore" "$dir/save"; do printf '%s\n' "$noop" >"$d/action.yml"; done
  repl+=(--local-repository "$repo@$ref=$dir")
done < <(grep -hoE 'uses: *[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(/[A-Za-z0-9_./-]+)?@[0-9a-f]{40}' \
           action/action.yml .github/workflows/action-selftest.yml \
         | sed -E 's/uses: *([^/]+\/[^/@]+)[^@]*@([0-9a-f]{40})/\1 \2/' | sort -u)
act push -W .github/workflows/action-selftest.yml -P ubuntu-latest=-self-hosted \
  --action-offline-mode --no-cache-server --env SELFTEST_PYTHON="$python" "${repl[@]}" 2>&1 \
  | tail -n 60
