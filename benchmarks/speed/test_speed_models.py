"""The plugin side of the speed benchmark: the same models as cold_warm.py, as ModelCases
(run.py runs one `pytest --compile-cache-check` session per test)."""
import pytest
import torch

from pytest_compilecache import ModelCase


@pytest.fixture
def resnet18_train():
    torchvision = pytest.importorskip("torchvision")
    return ModelCase(torchvision.models.resnet18(num_classes=10),
                     example_inputs=(torch.randn(16, 3, 224, 224),), train=True)


@pytest.fixture
def resnet152_ro():
    torchvision = pytest.importorskip("torchvision")
    return ModelCase(torchvision.models.resnet152().to(torch.float32),
                     example_inputs=(torch.randn(32, 3, 128, 128),))


@pytest.fixture
def gpt2_inference():
    transformers = pytest.importorskip("transformers")
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=6))
    return ModelCase(model, example_inputs=(torch.randint(0, 50257, (4, 128)),),
                     example_kwargs={"use_cache": False})


@pytest.fixture
def bert_train():
    transformers = pytest.importorskip("transformers")
    model = transformers.BertForSequenceClassification(
        transformers.BertConfig(num_hidden_layers=4, num_labels=3))  # dropout as configured
    return ModelCase(model, example_inputs=(torch.randint(0, 30522, (8, 128)),),
                     loss_fn=lambda out: out.logits.float().pow(2).mean(), train=True)


@pytest.mark.compile_cache
def test_resnet18_train(resnet18_train):
    ...


@pytest.mark.compile_cache(mode="reduce-overhead", fullgraph=True)
def test_resnet152_ro(resnet152_ro):
    ...


@pytest.mark.compile_cache
def test_gpt2_inference(gpt2_inference):
    ...


@pytest.mark.compile_cache
def test_bert_train(bert_train):
    ...
