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
# shellcheck source=.ci/act_stand_ins.sh
. .ci/act_stand_ins.sh
act_stand_ins "$stub" action/action.yml .github/workflows/action-selftest.yml
act push -W .github/workflows/action-selftest.yml -P ubuntu-latest=-self-hosted \
  --action-offline-mode --no-cache-server --env SELFTEST_PYTHON="$python" "${repl[@]}" 2>&1 \
  | tail -n 150
