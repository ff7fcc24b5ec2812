#!/usr/bin/env bash
# The PR lane self-test's assertions (.github/workflows/pr-lane-selftest.yml passes the
# steps' outputs in; .ci/pr_lane.sh says in PR_LANE_EXPECT what the commit changed), on
# the outputs, the job summary, the annotations and the JSON report, whose lines that
# matter are printed for the log.
set -euo pipefail
fail() { echo "::error title=pr-lane-selftest::$*"; exit 1; }
# one value of a check in a JSON report: report.py FILE EXPRESSION (c: the one check)
field() { "$SELFTEST_PYTHON" -c 'import json,sys; r=json.load(open(sys.argv[1])); c=r["checks"][0]; print(eval(sys.argv[2]))' "$1" "$2"; }
# FILE must hold TEXT (fixed); its first line that does is printed for the log
says() { grep -F -m1 -- "$2" "$1" | cut -c1-400 || fail "$3: $(basename "$1") does not say '$2'"; }
accept="pytest-compilecache accept $BASE"

# which of a PR's steps ran: both, or the keys-only step or the deploy alone (PR_LANE_STEPS)
ran() { [ "${PR_LANE_STEPS:-both}" = both ] || [ "$PR_LANE_STEPS" = "$1" ]; }
if ran deploy; then
  [ "$CHECK_VERDICT" != "" ] || fail "the check step gave no verdict"
else
  [ -z "$CHECK_VERDICT" ] || fail "the deploy ran where PR_LANE_STEPS=$PR_LANE_STEPS"
fi
ran keys || [ -z "$KEYS_VERDICT" ] || fail "keys-only ran where PR_LANE_STEPS=$PR_LANE_STEPS"
# as on GitHub (torch reads CI into every AOT key; the acceptances are recorded without it)
[ "${CI:-}" = true ] || fail "the run has CI='${CI:-}', GitHub's runs CI=true"
case "$PR_LANE_EXPECT" in
  main)
    [ "$EVENT" = push ] || fail "main's run is a push, got $EVENT"
    [ "$CHECK_VERDICT" = pass ] || fail "main: expected pass, got $CHECK_VERDICT"
    [ "$(field "$CHECK_REPORT" 'r["settings"]["store_caches"]')" = True ] \
      || fail "main's run did not keep its compile caches"
    ;;
  same|config|accepted|stale)
    [ "$EVENT" = pull_request ] || fail "a PR's run is a pull_request, got $EVENT"
    ! ran deploy || [ "$(field "$CHECK_REPORT" 'r["settings"]["store_caches"]')" = False ] \
      || fail "a PR run kept compile caches"
    ! ran deploy || [ "$(field "$CHECK_REPORT" 'c["launch"].get("cold")')" = stored ] \
      || fail "the deploy compiled the base instead of warming over main's caches"
    ;;&
  same)  # the deploy alone: every layer hit over main's caches
    [ "$CHECK_VERDICT" = pass ] || fail "a README edit: expected pass, got $CHECK_VERDICT"
    [ -z "$CHECK_MISSED" ] || fail "a README edit missed layers: $CHECK_MISSED"
    ;;
  config)  # keys-only alone, red: it names the flip, and the one command that accepts it
    [ "$KEYS_DRIFTED" = 1 ] || fail "an Inductor config flip: expected 1 drifted, got '$KEYS_DRIFTED'"
    [ "$KEYS_VERDICT" = fail ] || fail "an Inductor config flip: keys-only gave $KEYS_VERDICT"
    grep -q "inductor_config\[epilogue_fusion\]" <<<"$(field "$KEYS_REPORT" 'c["drift"]')" \
      || fail "the keys-only drift does not name inductor_config[epilogue_fusion]"
    says "$KEYS_ANNOTATIONS" "\`$accept\`" "the keys-only annotation"
    ;;
  accepted)  # the deploy alone (keys-only's `accepted`: test_accepted_drift*.py), with
    # the acceptance committed: green, and the summary says what it accepts
    [ "$CHECK_VERDICT" = pass ] || fail "the accepted flip: the deploy gave $CHECK_VERDICT"
    [ "$(field "$CHECK_REPORT" 'c["layers"]["fx_graph"]["state"]')" = accepted ] \
      || fail "the deploy's fx_graph is not accepted"
    says "$CHECK_SUMMARY" "| ☑️ accepted | ☑️ accepted |" "the deploy's summary"
    [ "$(field "$CHECK_REPORT" 'any(n.startswith("the drift compilecache-accepted.json accepts "
        "(inductor_config[epilogue_fusion]) explains") for n in c["notes"])')" = True ] \
      || fail "the deploy's notes do not say what the acceptance explains"
    ! grep -q "^::error" "$CHECK_ANNOTATIONS" || fail "the accepted flip: $(cat "$CHECK_ANNOTATIONS")"
    ;;
  stale)  # the deploy alone: a model change accepted; its custom op's backward, in no
    # key, loads stale
    [ "$CHECK_VERDICT" = fail ] || fail "a stale entry under an accepted change: $CHECK_VERDICT"
    [ "$(field "$CHECK_REPORT" 'c["layers"]["fx_graph"]["state"]')" = accepted ] \
      || fail "the accepted model change's fx_graph misses are not accepted"
    [ "$(field "$CHECK_REPORT" 'any("keys changed against" in p for p in c["problems"])')" = False ] \
      || fail "the deploy blames the accepted drift, not the stale entry"
    says "$CHECK_SUMMARY" "a stale cache entry returns the baseline's numbers" "the deploy's summary"
    says "$CHECK_ANNOTATIONS" "differs from a fresh compile of this commit's code" \
      "the deploy's annotation"
    ;;
  *) fail "PR_LANE_EXPECT=$PR_LANE_EXPECT: one of main, same, config, accepted, stale" ;;
esac
echo "pr-lane self-test ($PR_LANE_EXPECT): as expected"
