"""A compiled step with a collective in its graph: relu(x @ w), all-reduced over the
ranks (functional collectives), each rank its own input; inference."""
import _rank
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

rank = _rank.start()
torch.manual_seed(0)
w = torch.randn(8, 8)
x = torch.randn(4, 8) * (rank + 1)  # each rank its own input


def step(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return funcol.all_reduce(torch.relu(x @ w), "sum", dist.group.WORLD) + 1


with torch.no_grad():
    out = torch.compile(step)(x, w)
_rank.finish(out)
