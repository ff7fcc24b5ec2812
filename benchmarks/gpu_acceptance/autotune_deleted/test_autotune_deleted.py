import pytest

from test_max_autotune import MLP  # noqa: F401
from pytest_compilecache import ModelCase


@pytest.fixture
def mlp_deleted():
    import torch

    return ModelCase(MLP(), example_inputs=(torch.randn(256, 1024),))


@pytest.mark.compile_cache(mode="max-autotune-no-cudagraphs")
def test_mlp_autotune_results_deleted(mlp_deleted):
    ...
