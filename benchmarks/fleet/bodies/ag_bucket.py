"""pytorch#188332's shape: two all-gathers bucketed into one by Inductor's
bucket_all_gathers_fx pass, which writes the rank into the graph after the key."""
import _rank
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

rank = _rank.start()
dev = _rank.device()
torch._inductor.config.bucket_all_gathers_fx = "all"
group = dist.group.WORLD


def f(a, b):
    ga = funcol.all_gather_tensor(a, 0, group)
    gb = funcol.all_gather_tensor(b, 0, group)
    return torch.cat([ga * 2, gb + 1])


torch.manual_seed(rank)
a, b = torch.randn(4, 8, device=dev), torch.randn(4, 8, device=dev)
out = torch.compile(f)(a, b)
_rank.finish(out)
