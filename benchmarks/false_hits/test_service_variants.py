"""A service's variants, for cost.py: the same model served at two sizes (CPU: an MLP;
GPU: resnet18 inference), each a parametrized instance of one test function, as
--compile-cache-share-variants runs them over one cache."""
import pytest
import torch

from pytest_compilecache import ModelCase

GPU = torch.cuda.is_available()


@pytest.fixture
def served(request):
    batch = request.param
    if GPU:
        import torchvision

        model = torchvision.models.resnet18().eval()
        return ModelCase(model, example_inputs=(torch.randn(batch, 3, 224, 224),))
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
    return ModelCase(model, example_inputs=(torch.randn(batch, 32),))


@pytest.mark.compile_cache
@pytest.mark.parametrize("served", [8, 16], indirect=True, ids=["batch8", "batch16"])
def test_served(served):
    ...
