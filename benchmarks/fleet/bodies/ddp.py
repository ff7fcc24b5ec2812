"""DDP(torch.compile(net)): a small MLP trained two SGD steps over gloo."""
import _rank
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

rank = _rank.start()
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
model = DistributedDataParallel(torch.compile(net))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
torch.manual_seed(1 + rank)  # each rank its own batch, as data-parallel ranks have
losses = []
for _ in range(2):
    x, y = torch.randn(4, 8), torch.randn(4, 4)
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
params = torch.cat([p.detach().flatten() for p in net.parameters()])
_rank.finish(params, losses)
