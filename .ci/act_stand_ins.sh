# shellcheck shell=bash
# Sourced by .ci/act.sh and .ci/pr_lane.sh: act fetches every remote action a workflow
# or composite names, even behind `if: !env.ACT`, so `act_stand_ins DIR FILE...` maps each
# pinned `uses:` of the FILEs to an empty local stand-in under DIR and leaves act's
# arguments for them in the array `repl` (the steps are skipped under act anyway).
act_stand_ins() {
  local dir=$1 repo ref d x
  shift
  local noop='name: stand-in
description: an empty stand-in for a remote action under act
runs:
  using: composite
  steps: []'
  repl=()
  while read -r repo ref; do
    d=$dir/${repo//\//_}-$ref
    mkdir -p "$d/restore" "$d/save"
    for x in "$d" "$d/restore" "$d/save"; do printf '%s\n' "$noop" >"$x/action.yml"; done
    repl+=(--local-repository "$repo@$ref=$d")
  done < <(grep -hoE 'uses: *[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(/[A-Za-z0-9_./-]+)?@[0-9a-f]{40}' "$@" \
           | sed -E 's/uses: *([^/]+\/[^/@]+)[^@]*@([0-9a-f]{40})/\1 \2/' | sort -u)
}
