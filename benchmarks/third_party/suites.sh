# shellcheck shell=bash disable=SC2034  # sourced: the variables are used by its callers
# Pinned third-party suites (sourced by run.sh and export_sources.sh).
# Each suite: the commit its tests come from, the files exported from it, the PyPI
# package installed to run them (the released version closest to the commit), the
# environment its conftest needs, and the node ids checked.

KORNIA_REPO=https://github.com/kornia/kornia
KORNIA_COMMIT=b4f5a78a13891c7ac4c1cd9695941380273e981d   # 2026-08-18, v0.9.0rc1-61-gb4f5a78a1
KORNIA_FILES="LICENSE pyproject.toml conftest.py testing tests/__init__.py tests/contrib/__init__.py tests/contrib/test_kmeans.py tests/augmentation/test_augmentation.py"
KORNIA_PIP="kornia==0.9.0"
# kornia's conftest deselects every *dynamo*/*compile* test unless KORNIA_TEST_OPTIMIZER is set;
# --device/--dtype/--optimizer default to cpu/float32/inductor (env KORNIA_TEST_*).
KORNIA_ENV="KORNIA_TEST_OPTIMIZER=inductor KORNIA_TEST_DEVICE=cpu KORNIA_TEST_DTYPE=float32"
KORNIA_TESTS="tests/contrib/test_kmeans.py::TestKMeans::test_dynamo[cpu-float32-inductor] tests/augmentation/test_augmentation.py::TestRandomGaussianNoise::test_dynamo[cpu-float32-inductor]"

PYG_REPO=https://github.com/pyg-team/pytorch_geometric
PYG_COMMIT=5c6461b2305ad068a6d61165b3c55852a11aaa41     # 2026-08-17, 2.8.0-13-g5c6461b23
PYG_FILES="LICENSE pyproject.toml test/conftest.py test/nn/test_compile_dynamic.py"
PYG_PIP="torch_geometric==2.8.1"
# @onlyFullTest skips unless FULL_TEST=1; @withDevice parametrizes over cpu (+cuda if present).
PYG_ENV="FULL_TEST=1"
PYG_TESTS="test/nn/test_compile_dynamic.py::test_dynamic_torch_compile[cpu]"

ALL_SUITES="kornia pyg"
