"""Eight real models for the sharding benchmark: torchvision, timm and transformers
(built from config, no weights), inference and training. Dropout is off in the training
cases: compiled and eager draw different random masks, so they could not be compared."""
import pytest
import torch

from pytest_compilecache import ModelCase

torchvision = pytest.importorskip("torchvision")


def images(n=8):
    return (torch.randn(n, 3, 224, 224),)


def timm_model(name, **kw):
    timm = pytest.importorskip("timm")
    return timm.create_model(name, pretrained=False, **kw)


def transformers():
    return pytest.importorskip("transformers")


BUILDERS = {
    "resnet18_train": lambda: ModelCase(torchvision.models.resnet18(num_classes=10),
                                        example_inputs=images(16), train=True),
    "resnet50_infer": lambda: ModelCase(torchvision.models.resnet50(), example_inputs=images()),
    "mobilenet_v3_train": lambda: ModelCase(
        torchvision.models.mobilenet_v3_small(num_classes=10, dropout=0.0),
        example_inputs=images(16), train=True),
    "efficientnet_b0_infer": lambda: ModelCase(torchvision.models.efficientnet_b0(),
                                               example_inputs=images()),
    "vit_tiny_infer": lambda: ModelCase(timm_model("vit_tiny_patch16_224"), example_inputs=images()),
    "deit_small_train": lambda: ModelCase(timm_model("deit_small_patch16_224", num_classes=10),
                                          example_inputs=images(), train=True),
    "gpt2_infer": lambda: ModelCase(
        transformers().GPT2LMHeadModel(transformers().GPT2Config(n_layer=4)),
        example_inputs=(torch.randint(0, 50257, (4, 128)),), example_kwargs={"use_cache": False}),
    "bert_train": lambda: ModelCase(
        transformers().BertForSequenceClassification(
            transformers().BertConfig(num_hidden_layers=4, num_labels=3, hidden_dropout_prob=0.0,
                                      attention_probs_dropout_prob=0.0)),
        example_inputs=(torch.randint(0, 30522, (8, 128)),),
        loss_fn=lambda out: out.logits.float().pow(2).mean(), train=True),
}


@pytest.fixture
def case(request):
    return BUILDERS[request.param]()


@pytest.mark.compile_cache
@pytest.mark.parametrize("case", sorted(BUILDERS), indirect=True)
def test_model(case):
    ...
