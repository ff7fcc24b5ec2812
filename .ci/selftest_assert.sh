#!/usr/bin/env bash
# shellcheck disable=SC2016  # backticks below are Markdown, not command substitution
# The self-test's assertions on what the Action produced for the two examples
# (.github/workflows/action-selftest.yml passes the step outputs in as variables).
set -euo pipefail
fail() { echo "::error title=action-selftest::$*"; exit 1; }
show() { echo "--- $1"; cat "$1"; }

[ "$VERDICT" = fail ] || fail "expected fail (one pass, one fail), got verdict '$VERDICT'"
[ "$PASSED" = 1 ] || fail "expected 1 passed, got '$PASSED'"
[ "$FAILED" = 1 ] || fail "expected 1 failed, got '$FAILED'"
[[ ",$MISSED," == *,aot_autograd,* ]] || fail "expected aot_autograd in layers-missed, got '$MISSED'"

show "$SUMMARY"
grep -qF '| `examples/test_models.py::test_mlp_training` | ✅ pass | ' "$SUMMARY" \
  || fail "no passing row for test_mlp_training in the summary"
grep -qF '| `examples/test_models.py::test_scorer_serving` | ❌ fail | ' "$SUMMARY" \
  || fail "no failing row for test_scorer_serving in the summary"
grep -qF '<details><summary>❌ <code>examples/test_models.py::test_scorer_serving</code>' "$SUMMARY" \
  || fail "no details section for the failing check"

show "$ANNOTATIONS"
line=$(grep -n 'def test_scorer_serving' examples/test_models.py | cut -d: -f1)
decorator=$((line - 1))
grep -qE "^::error file=examples/test_models.py,line=($line|$decorator),title=compile-cache%3A aot_autograd miss::examples/test_models.py::test_scorer_serving%0A" \
  "$ANNOTATIONS" || fail "no error annotation for test_scorer_serving at its def line"
echo "action self-test: outputs, summaries and annotation as expected"
