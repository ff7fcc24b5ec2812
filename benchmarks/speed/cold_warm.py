"""Hand-written baseline: one plain process that builds, compiles and runs a model (run it
twice over one cache dir): the hand-written pair run.py times."""
import sys
import time

t0 = time.time()
import torch  # noqa: E402

name = sys.argv[1]
torch.manual_seed(0)
if name == "resnet18_train":
    import torchvision
    m = torchvision.models.resnet18(num_classes=10).cuda()
    x = torch.randn(16, 3, 224, 224, device="cuda")
    f = torch.compile(m)
    out = f(x)
    out.sum().backward()
elif name == "resnet152_ro":
    import torchvision
    m = torchvision.models.resnet152().to(torch.float32).cuda().eval()
    x = torch.randn(32, 3, 128, 128, device="cuda")
    f = torch.compile(m, mode="reduce-overhead", fullgraph=True)
    with torch.no_grad():
        out = f(x)
        out = f(x)
elif name == "gpt2_inference":
    import transformers
    m = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=6)).cuda().eval()
    tokens = torch.randint(0, 50257, (4, 128), device="cuda")
    f = torch.compile(m)
    with torch.no_grad():
        out = f(tokens, use_cache=False)
elif name == "bert_train":
    import transformers
    m = transformers.BertForSequenceClassification(
        transformers.BertConfig(num_hidden_layers=4, num_labels=3)).cuda()
    tokens = torch.randint(0, 30522, (8, 128), device="cuda")
    f = torch.compile(m)
    f(tokens).logits.float().pow(2).mean().backward()
torch.cuda.synchronize()
print(f"{name} done in {time.time()-t0:.1f}s", flush=True)
