"""The GPU acceptance set: real models, built from config (no weights downloaded).

    pytest --compile-cache-check benchmarks/gpu_acceptance --compile-cache-report=gpu.json
"""
import pytest
import torch

from pytest_compilecache import ModelCase

torchvision = pytest.importorskip("torchvision")


@pytest.fixture
def resnet18_training():
    model = torchvision.models.resnet18(num_classes=10)
    return ModelCase(model, example_inputs=(torch.randn(16, 3, 224, 224),), train=True)


@pytest.fixture
def resnet18_inference():
    model = torchvision.models.resnet18()
    return ModelCase(model, example_inputs=(torch.randn(16, 3, 224, 224),))


@pytest.fixture
def vit_tiny_inference():
    timm = pytest.importorskip("timm")
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False)
    return ModelCase(model, example_inputs=(torch.randn(8, 3, 224, 224),))


@pytest.fixture
def gpt2_inference():
    transformers = pytest.importorskip("transformers")
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=6))
    tokens = torch.randint(0, 50257, (4, 128))
    return ModelCase(model, example_inputs=(tokens,), example_kwargs={"use_cache": False})


@pytest.fixture
def resnet152_reduce_overhead():
    """The workload of PyTorch's blog post on portable caches: random-init logits are
    huge, and cuDNN's TF32 convolutions put compiled and eager 4% apart elementwise."""
    model = torchvision.models.resnet152()
    return ModelCase(model, example_inputs=(torch.randn(32, 3, 128, 128),),
                     compile_kwargs={"mode": "reduce-overhead", "fullgraph": True})


@pytest.fixture
def bert_mlm_training():
    """BERT-base masked-LM training step, random init, dropout off."""
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = transformers.BertForMaskedLM(config)
    ids = torch.randint(0, config.vocab_size, (4, 128))
    return ModelCase(model, example_kwargs={"input_ids": ids, "labels": ids},
                     loss_fn=lambda out: out.loss, train=True)


@pytest.mark.compile_cache
def test_resnet152_reduce_overhead(resnet152_reduce_overhead):
    ...


@pytest.mark.compile_cache
def test_bert_mlm_training(bert_mlm_training):
    ...


@pytest.mark.compile_cache
def test_resnet18_training(resnet18_training):
    ...


@pytest.mark.compile_cache
def test_resnet18_inference(resnet18_inference):
    ...


@pytest.mark.compile_cache
def test_vit_tiny_inference(vit_tiny_inference):
    ...


@pytest.mark.compile_cache
def test_gpt2_inference(gpt2_inference):
    ...


class Block(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.fc1 = torch.nn.Linear(width, 4 * width)
        self.fc2 = torch.nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x))))


class Stack(torch.nn.Module):
    def __init__(self, depth=64, width=256):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(width) for _ in range(depth))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


@pytest.mark.compile_cache
def test_regional_64_blocks(compile_cache):
    """Regional compilation: each repeated block is compiled, not the whole model."""
    model = Stack().to(compile_cache.device).eval()
    for block in model.blocks:
        block.compile()
    x = torch.randn(8, 128, 256, device=compile_cache.device)
    with torch.no_grad():
        y = model(x)
    compile_cache.record("y", y)
