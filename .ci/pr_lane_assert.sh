#!/usr/bin/env bash
# The PR lane self-test's assertions (.github/workflows/pr-lane-selftest.yml passes the
# steps' outputs in; .ci/pr_lane.sh says in PR_LANE_EXPECT what the commit changed).
set -euo pipefail
fail() { echo "::error title=pr-lane-selftest::$*"; exit 1; }
# one value of a check in a JSON report: report.py FILE EXPRESSION (c: the one check)
field() { "$SELFTEST_PYTHON" -c 'import json,sys; r=json.load(open(sys.argv[1])); c=r["checks"][0]; print(eval(sys.argv[2]))' "$1" "$2"; }

[ "$CHECK_VERDICT" != "" ] || fail "the check step gave no verdict"
case "$PR_LANE_EXPECT" in
  main)
    [ "$EVENT" = push ] || fail "main's run is a push, got $EVENT"
    [ "$CHECK_VERDICT" = pass ] || fail "main: expected pass, got $CHECK_VERDICT"
    [ "$(field "$CHECK_REPORT" 'r["settings"]["store_caches"]')" = True ] \
      || fail "main's run did not keep its compile caches"
    ;;
  same|config)
    [ "$EVENT" = pull_request ] || fail "a PR's run is a pull_request, got $EVENT"
    [ "$(field "$CHECK_REPORT" 'r["settings"]["store_caches"]')" = False ] \
      || fail "a PR run kept compile caches"
    [ "$(field "$CHECK_REPORT" 'c["launch"].get("cold")')" = stored ] \
      || fail "the deploy compiled the base instead of warming over main's caches"
    ;;&
  same)
    [ "$KEYS_DRIFTED" = 0 ] || fail "a README edit drifted $KEYS_DRIFTED key(s)"
    [ "$CHECK_VERDICT" = pass ] || fail "a README edit: expected pass, got $CHECK_VERDICT"
    [ -z "$CHECK_MISSED" ] || fail "a README edit missed layers: $CHECK_MISSED"
    ;;
  config)
    [ "$KEYS_DRIFTED" = 1 ] || fail "an Inductor config flip: expected 1 drifted, got '$KEYS_DRIFTED'"
    grep -q "inductor_config\[epilogue_fusion\]" <<<"$(field "$KEYS_REPORT" 'c["drift"]')" \
      || fail "the keys-only drift does not name inductor_config[epilogue_fusion]"
    [ "$CHECK_VERDICT" = fail ] || fail "an Inductor config flip: expected fail, got $CHECK_VERDICT"
    [[ ",$CHECK_MISSED," == *,fx_graph,* ]] || fail "expected fx_graph missed, got '$CHECK_MISSED'"
    grep -qF "inductor_config[epilogue_fusion]" "$CHECK_SUMMARY" \
      || fail "the deploy's summary does not name inductor_config[epilogue_fusion]"
    ;;
  *) fail "PR_LANE_EXPECT=$PR_LANE_EXPECT: one of main, same, config" ;;
esac
echo "pr-lane self-test ($PR_LANE_EXPECT): as expected"
