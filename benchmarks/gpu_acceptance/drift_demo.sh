#!/usr/bin/env bash
# Drift and the deploy scenario on a real model on the GPU (device tool), in a
# throwaway git repository of a vit_tiny package with three commits:
#   c0 first · c1 a comment in the model file · c2 turns TF32 on in the package
# Run from the pytest-compilecache checkout after run.sh's install (needs gitpython).
set -u
out=${OUT:-/tmp/out}
mkdir -p "$out"
here=$(pwd)
# without the pytest11 entry point (an install that failed), load the plugin by name
plugin=()
python -c "import importlib.metadata as m, sys; sys.exit(not any(e.name == 'compilecache' for e in m.entry_points(group='pytest11')))" \
  || { export PYTHONPATH=$here${PYTHONPATH:+:$PYTHONPATH}; plugin=(-p pytest_compilecache.plugin); }
if [ -z "${TRITON_PTXAS_PATH:-}" ]; then  # see run.sh
  ptxas=$(python -c "import pathlib, torch; print(pathlib.Path(torch.__file__).parent / 'bin' / 'ptxas')")
  [ -x "$ptxas" ] && export TRITON_PTXAS_PATH=$ptxas
fi
repo=$(mktemp -d)/vit_repo
mkdir -p "$repo/pkg" "$repo/tests" && cd "$repo" || exit 1
git init -q && git config user.email demo@example.com && git config user.name demo
printf '[pytest]\npythonpath = .\n' >pytest.ini
printf 'import torch  # noqa: F401\n' >pkg/__init__.py
cat >pkg/model.py <<'EOF'
import timm


def build():
    return timm.create_model("vit_tiny_patch16_224", pretrained=False)
EOF
cat >tests/test_vit.py <<'EOF'
import pytest
import torch

from pkg.model import build
from pytest_compilecache import ModelCase


@pytest.fixture
def vit():
    return ModelCase(build(), example_inputs=(torch.randn(8, 3, 224, 224),))


@pytest.mark.compile_cache
def test_vit(vit):
    ...
EOF
git add -A && git commit -qm "first" && c0=$(git rev-parse HEAD)
sed -i 's/^def build/# the serving model\ndef build/' pkg/model.py && git commit -qam "comment the model" && c1=$(git rev-parse HEAD)
printf 'torch.backends.cuda.matmul.allow_tf32 = True\n' >>pkg/__init__.py && git commit -qam "faster matmuls" && c2=$(git rev-parse HEAD)

session() { echo; echo "===== $*"; python -m pytest "${plugin[@]}" -p no:cacheprovider --compile-cache-check "$@" 2>&1 | grep -v "warm wrote" | tail -45; }
session --compile-cache-baseline="$c1" --compile-cache-report="$out/drift-report.json"
git checkout -q "$c1"
session --compile-cache-baseline="$c0" --compile-cache-baseline-warm
git checkout -q "$c2"
session --compile-cache-baseline="$c1" --compile-cache-baseline-warm
echo; echo "===== show the manifest of c1"
python -m pytest_compilecache show .compilecache/manifests/*/"$c1".json | head -12
python - "$c1" <<'EOF'
import glob, json, sys
m = json.load(open(glob.glob(f".compilecache/manifests/*/{sys.argv[1]}.json")[0]))
print("environment", m["environment"])
g = next(iter(m["checks"].values()))["graphs"]["fx_graph:0/0"]
for name, h, value in g["components"]:
    if name.startswith(("system_info", "cuda_matmul", "torch_version")):
        print(f"  [{h[:12]}] {name}: {value[:100]}")
EOF
cp -r .compilecache/manifests "$out/" 2>/dev/null
cd "$here" || exit 0
