"""Is resnet18's compiled-vs-eager gradient gap precision (TF32 + BatchNorm
cancellation) or a real difference? Relative error by norm, TF32 on and off."""
import sys

import torch
import torchvision

sys.path.insert(0, ".")
from pytest_compilecache import ModelCase  # noqa: E402
from pytest_compilecache.child import workload as wl

for tf32 in (True, False):
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.manual_seed(0)
    torch._dynamo.reset()
    case = ModelCase(torchvision.models.resnet18(num_classes=10),
                     example_inputs=(torch.randn(16, 3, 224, 224),), train=True)
    model, inputs, kw = wl.prepare_case(case, "cuda")
    state = wl.snapshot_state(model)
    c = wl.run_case_step(torch.compile(model), model, case, inputs, kw, "")
    model.load_state_dict(state)
    e = wl.run_case_step(model, model, case, inputs, kw, "")
    model.load_state_dict(state)
    e2 = wl.run_case_step(model, model, case, inputs, kw, "")
    worst = sorted(((float((c[k] - e[k]).norm() / e[k].norm().clamp_min(1e-30)),
                     float((e2[k] - e[k]).norm() / e[k].norm().clamp_min(1e-30)), k) for k in c),
                   reverse=True)[:4]
    print(f"tf32={tf32}: worst |compiled-eager|/|eager|, |eager-eager|/|eager|:")
    for w in worst:
        print(f"   {w[2]:32s} {w[0]:.3e}  {w[1]:.3e}")
