#!/usr/bin/env bash
# The test suite on another torch: a fresh venv with torch==VERSION, the README's
# install, then the README's test command (extra arguments go to pytest).
#   bash .ci/compat.sh 2.15.0
# VENV=DIR keeps the venv there (and reuses it); default: a temporary one.
# A pip constraint that caps torch below VERSION (/etc/xdg/pip on this project's
# machines) is lifted for these commands only.
set -euo pipefail
version=${1:?usage: .ci/compat.sh TORCH_VERSION [PYTEST_ARGS...]}
shift
cd "$(dirname "$0")/.."
venv=${VENV:-$(mktemp -d)/venv}
[ -x "$venv/bin/python" ] || python -m venv "$venv"
# shellcheck disable=SC1091
. "$venv/bin/activate"
export PIP_CONSTRAINT=/dev/null PIP_RETRIES=0
pip install -q "torch==$version" --index-url https://download.pytorch.org/whl/cpu \
  || pip install -q "torch==$version"
pip install -q -e ".[xdist]"
python -c "import torch; print('torch', torch.__version__)"
python -m pytest tests -p no:cacheprovider -q "$@"
