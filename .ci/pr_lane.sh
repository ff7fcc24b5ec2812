#!/usr/bin/env bash
# The PR lane (.github/workflows/pr-lane-selftest.yml) under act, offline: a scratch model
# repository of the shipped examples, its MLP in two stages (a graph break; the second
# holds a custom op of ops.py); main's push keeps its compile caches in a host directory
# standing in for actions/cache; then PRs restore them: a README edit (no key changes:
# every layer hits warm over main's caches); an Inductor config flip, red (the keys-only
# drift names it and the command that accepts it), then green with the acceptance that
# command writes (CI unset, as on a laptop; the runs have CI=true) committed; then a model
# change accepted the same way whose custom op's backward changed under the same key (a
# stale cache entry): red. A PR
# run whose point is one step's runs that step alone (the slow lane's time): the README
# PR, the accepted and the stale runs the deploy, the config flip keys-only.
# Nothing a PR run does reaches the store.
# usage: .ci/pr_lane.sh [PYTHON]   (the Python with torch and the plugin installed)
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-$(command -v python)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
repo=$work/model store=$work/store events=$work/events
# act's host runs (their RUNNER_TEMP, where the checks' roots are) in this run's own dir,
# not act's default ($XDG_CACHE_HOME/act, else ~/.cache/act: the tests set XDG_CACHE_HOME,
# and other act runs on the machine share it), removed with it
acts=$work/act
mkdir -p "$repo" "$store" "$events" "$acts"
chmod 700 "$store"
cp examples/conftest.py examples/models.py examples/test_models.py "$repo/"
printf '[pytest]\n' >"$repo/pytest.ini"
# the custom op: tests/conftest.py's SCALED_SIN_OPS, read without importing the tests
"$python" - "$repo/ops.py" <<'EOF'
import ast, sys
tree = ast.parse(open("tests/conftest.py").read())
text = next(n.value.value for n in tree.body if isinstance(n, ast.Assign)
            and getattr(n.targets[0], "id", "") == "SCALED_SIN_OPS")
open(sys.argv[1], "w").write(text.replace("NS::", "lane::"))
EOF
two_stages='        h = torch.relu(self.l1(x))\n        torch._dynamo.graph_break()\n'
two_stages+='        return self.l2(scaled_sin(h))'
edits=(-e '/^import torch$/a from ops import scaled_sin')
edits+=(-e "s/        return self.l2(torch.relu(self.l1(x)))/$two_stages/")
sed -i "${edits[@]}" "$repo/models.py"
grep -q scaled_sin "$repo/models.py" || { echo "pr lane: the MLP's two stages not written"; exit 1; }
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
lane() {  # EVENT EXPECT [STEPS: keys or deploy alone, where the point is that one's]
  echo "--- the PR lane: $1 ($2)"
  local log=$work/$2.log started=$SECONDS
  act "$1" -e "$events/$([ "$1" = push ] && echo push || echo pr).json" \
    -W .github/workflows/pr-lane-selftest.yml -P ubuntu-latest=-self-hosted \
    --action-offline-mode --no-cache-server --action-cache-path "$acts" \
    --env SELFTEST_PYTHON="$python" --env PR_LANE_REPO="$repo" --env PR_LANE_STORE="$store" \
    --env PR_LANE_EXPECT="$2" --env PR_LANE_STEPS="${3:-both}" \
    "${repl[@]}" >"$log" 2>&1 || { tail -n 60 "$log"; echo "pr lane: the $1 run ($2) failed"; exit 1; }
  tail -n 40 "$log"
  echo "--- the PR lane: $1 ($2) took $((SECONDS - started)) s;" \
    "$(grep -o 'pytest exited [0-9]* after [0-9]* s' "$log" | paste -sd';')"
  # a GitHub runner empties RUNNER_TEMP after each job; act's host runner leaves what a
  # failing check kept, at the path where main's caches unpack (each act run has its own
  # temp dir, main's caches the one of main's run): the next deploy could not use them
  grep -o "cache root kept: $acts/[^ ]*" "$log" | cut -d' ' -f4 | xargs -r rm -rf || true
}
# the PR's author, on the PR's branch: the one command the red run names, over a store of
# their own (the first records the base's keys in a worktree), then the acceptance
# committed: the diff is the review. On a laptop, CI unset, where the runs under act have
# CI=true, as GitHub's: torch reads CI (functorch's error_on_custom_op_aliasing defaults
# to it, in every AOT key), so the keys differ from the runs' and the entry must match
# the changed components instead.
accept() {  # COMMIT-MESSAGE
  local started=$SECONDS
  (cd "$repo" && env -u CI "$python" -m pytest_compilecache accept --store "$work/local" \
    "$base" -- test_models.py::test_mlp_training)
  echo "--- accept took $((SECONDS - started)) s"
  g add -A && g commit -qm "$1"
  [ "$(g show --name-only --format= HEAD)" = compilecache-accepted.json ] \
    || { echo "pr lane: the acceptance commit is not compilecache-accepted.json alone"; exit 1; }
}
lane push main
ls -d "$store"/caches/*/"$base"/* >/dev/null || { echo "pr lane: main kept no caches"; exit 1; }
before=$(cd "$store" && find . | sort)
mkdir -m 700 "$work/local"
g checkout -qb pr
printf 'a model\n' >"$repo/README.md"
g add -A && g commit -qm "docs"
lane pull_request same deploy
g reset -q --hard main
sed -i '1i import torch._inductor.config\ntorch._inductor.config.epilogue_fusion = False' "$repo/test_models.py"
g add -A && g commit -qm "tune inductor"
lane pull_request config keys
accept "accept the config flip's new cache keys"
lane pull_request accepted deploy
g reset -q --hard main
sed -i 's/torch.relu(self.l1(x))/torch.nn.functional.gelu(self.l1(x))/' "$repo/models.py"
sed -i 's/return grad \* torch.cos(x)$/return grad * torch.cos(x) * 2.0/' "$repo/ops.py"
g add -A && g commit -qm "gelu; the custom op's backward fixed (in no cache key)"
accept "accept gelu's new cache keys"
lane pull_request stale deploy
[ "$(cd "$store" && find . | sort)" = "$before" ] || { echo "pr lane: a PR run changed the store"; exit 1; }
echo "pr lane: main kept its caches; a README PR passed warm over them; a config flip was red, then green accepted; an accepted PR over a stale entry was red; no PR run saved anything"
