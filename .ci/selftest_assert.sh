#!/usr/bin/env bash
# shellcheck disable=SC2016  # backticks below are Markdown, not command substitution
# The self-test's assertions on what the Action produced for the two examples
# (.github/workflows/action-selftest.yml passes the step outputs in as variables).
set -euo pipefail
fail() { echo "::error title=action-selftest::$*"; exit 1; }
show() { echo "--- $1"; cat "$1"; }

[ "$OK_VERDICT" = pass ] || fail "expected pass, got verdict '$OK_VERDICT'"
[ "$OK_PASSED" = 1 ] || fail "expected 1 passed, got '$OK_PASSED'"
[ "$BAD_VERDICT" = fail ] || fail "expected fail, got verdict '$BAD_VERDICT'"
[ "$BAD_FAILED" = 1 ] || fail "expected 1 failed, got '$BAD_FAILED'"
[[ ",$BAD_MISSED," == *,aot_autograd,* ]] || fail "expected aot_autograd in layers-missed, got '$BAD_MISSED'"

show "$OK_SUMMARY"
grep -qF '| `examples/test_models.py::test_mlp_training` | ✅ pass | ' "$OK_SUMMARY" \
  || fail "no passing row for test_mlp_training in the summary"
show "$BAD_SUMMARY"
grep -qF '| `examples/test_models.py::test_scorer_serving` | ❌ fail | ' "$BAD_SUMMARY" \
  || fail "no failing row for test_scorer_serving in the summary"
grep -qF '<details><summary>❌ <code>examples/test_models.py::test_scorer_serving</code>' "$BAD_SUMMARY" \
  || fail "no details section for the failing check"

show "$BAD_ANNOTATIONS"
line=$(grep -n 'def test_scorer_serving' examples/test_models.py | cut -d: -f1)
decorator=$((line - 1))
grep -qE "^::error file=examples/test_models.py,line=($line|$decorator),title=compile-cache%3A aot_autograd miss::examples/test_models.py::test_scorer_serving%0A" \
  "$BAD_ANNOTATIONS" || fail "no error annotation for test_scorer_serving at its def line"
echo "action self-test: outputs, summaries and annotation as expected"
