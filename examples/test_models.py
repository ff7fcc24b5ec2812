import pytest
import torch

from models import MLP, Scorer
from pytest_compilecache import ModelCase


@pytest.fixture
def mlp_training():
    # a training step: forward + backward, gradients compared too
    return ModelCase(MLP(), example_inputs=(torch.randn(8, 32),), train=True)


@pytest.fixture
def scorer_serving():
    # serving code that forgot torch.no_grad(): grad mode on, no backward ever runs
    return ModelCase(Scorer(), example_inputs=(torch.randn(4, 16),), no_grad=False)


@pytest.mark.compile_cache
def test_mlp_training(mlp_training):
    ...


@pytest.mark.compile_cache
def test_scorer_serving(scorer_serving):
    ...
