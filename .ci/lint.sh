#!/usr/bin/env bash
# The workflow and action linters of CI (offline wheels: see the README's development
# install): actionlint with shellcheck, zizmor, check-jsonschema; ruff and mypy.
set -euo pipefail
cd "$(dirname "$0")/.."
actionlint .github/workflows/*.yml
zizmor --offline --min-severity medium action/ .github/
check-jsonschema --builtin-schema vendor.github-actions action/action.yml
check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml
shellcheck .ci/*.sh benchmarks/*.sh benchmarks/*/*.sh
ruff check pytest_compilecache
mypy pytest_compilecache
