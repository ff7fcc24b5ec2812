#!/usr/bin/env bash
# The PR lane (.github/workflows/pr-lane-selftest.yml) under act, offline: a scratch model
# repository of the shipped examples; main's push keeps its compile caches in a host
# directory standing in for actions/cache; then two PRs restore them: a README edit (no
# key changes: every layer hits warm over main's caches) and an Inductor config flip (the
# keys-only drift and the deploy both name it). Nothing a PR run does reaches the store.
# usage: .ci/pr_lane.sh [PYTHON]   (the Python with torch and the plugin installed)
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-$(command -v python)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
repo=$work/model store=$work/store events=$work/events
mkdir -p "$repo" "$store" "$events"
chmod 700 "$store"
cp examples/conftest.py examples/models.py examples/test_models.py "$repo/"
printf '[pytest]\n' >"$repo/pytest.ini"
g() { git -C "$repo" -c user.name=t -c user.email=t@example.com "$@"; }
g init -q -b main
g add -A && g commit -qm "main"
base=$(g rev-parse HEAD)
printf '{"ref": "refs/heads/main", "repository": {"default_branch": "main"}}\n' >"$events/push.json"
printf '{"pull_request": {"base": {"sha": "%s", "ref": "main"}, "head": {"ref": "pr"}}, "repository": {"default_branch": "main"}}\n' \
  "$base" >"$events/pr.json"
# the remote actions the composite and the workflow name, as empty stand-ins
# shellcheck source=.ci/act_stand_ins.sh
. .ci/act_stand_ins.sh
act_stand_ins "$work/stubs" action/action.yml .github/workflows/pr-lane-selftest.yml
lane() {  # EVENT EXPECT
  echo "--- the PR lane: $1 ($2)"
  act "$1" -e "$events/$([ "$1" = push ] && echo push || echo pr).json" \
    -W .github/workflows/pr-lane-selftest.yml -P ubuntu-latest=-self-hosted \
    --action-offline-mode --no-cache-server --env SELFTEST_PYTHON="$python" \
    --env PR_LANE_REPO="$repo" --env PR_LANE_STORE="$store" --env PR_LANE_EXPECT="$2" \
    "${repl[@]}" 2>&1 | tail -n 40
  [ "${PIPESTATUS[0]}" = 0 ] || { echo "pr lane: the $1 run ($2) failed"; exit 1; }
}
lane push main
ls -d "$store"/caches/*/"$base"/* >/dev/null || { echo "pr lane: main kept no caches"; exit 1; }
before=$(cd "$store" && find . | sort)
g checkout -qb pr
printf 'a model\n' >"$repo/README.md"
g add -A && g commit -qm "docs"
lane pull_request same
g reset -q --hard main
sed -i '1i import torch._inductor.config\ntorch._inductor.config.epilogue_fusion = False' "$repo/test_models.py"
g add -A && g commit -qm "tune inductor"
lane pull_request config
[ "$(cd "$store" && find . | sort)" = "$before" ] || { echo "pr lane: a PR run changed the store"; exit 1; }
echo "pr lane: main kept its caches; a README PR passed warm over them; a config flip was named; no PR run saved anything"
