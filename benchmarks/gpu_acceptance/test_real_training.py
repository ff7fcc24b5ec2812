"""Models as people really train them: default dropout, stochastic depth,
drop-path, and a causal FlexAttention body. Their random tensors are named not
comparable with eager and gated warm vs cold; everything else is judged as before.

    pytest --compile-cache-check benchmarks/gpu_acceptance/test_real_training.py
"""
import pytest
import torch

from pytest_compilecache import ModelCase


@pytest.fixture
def convnext_tiny_training():
    """Stock torchvision ConvNeXt: StochasticDepth up to p=0.1 in training."""
    torchvision = pytest.importorskip("torchvision")
    model = torchvision.models.convnext_tiny(num_classes=10)
    return ModelCase(model, example_inputs=(torch.randn(8, 3, 128, 128),), train=True)


@pytest.fixture
def bert_mlm_default_dropout():
    """BERT-base masked LM with its default dropout (hidden and attention: 0.1)."""
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig()
    model = transformers.BertForMaskedLM(config)
    ids = torch.randint(0, config.vocab_size, (4, 128))
    return ModelCase(model, example_kwargs={"input_ids": ids, "labels": ids},
                     loss_fn=lambda out: out.loss, train=True)


@pytest.fixture
def vit_tiny_drop_path():
    timm = pytest.importorskip("timm")
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, drop_path_rate=0.1)
    return ModelCase(model, example_inputs=(torch.randn(8, 3, 224, 224),), train=True)


@pytest.mark.compile_cache
def test_convnext_tiny_training(convnext_tiny_training):
    ...


@pytest.mark.compile_cache
def test_bert_mlm_training_default_dropout(bert_mlm_default_dropout):
    ...


@pytest.mark.compile_cache
def test_vit_tiny_drop_path_training(vit_tiny_drop_path):
    ...


@pytest.mark.compile_cache
def test_flex_attention_causal(compile_cache):
    if compile_cache.device != "cuda":
        pytest.skip("FlexAttention's compiled kernels are Triton templates: CUDA only here")
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    B, H, S, D = 2, 4, 512, 64
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    mask = create_block_mask(causal, B=None, H=None, Q_LEN=S, KV_LEN=S, device="cuda")
    out = torch.compile(flex_attention)(q, k, v, block_mask=mask)
    compile_cache.record("out", out)
