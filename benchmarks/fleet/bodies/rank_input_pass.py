"""tests/test_ranks.py's rank-blind pass, plain: relu(x @ w) * s, s the rank's scale
(rank + 1, an input) replaced by a constant (what pytorch#188332's pass does with
dist.get_rank()), its uuid() blind to the rank; the compile agrees with eager on its
own rank."""
import _rank
import torch
from torch._inductor.custom_graph_pass import CustomGraphPass


class FoldRank(CustomGraphPass):
    def __init__(self, rank: int) -> None:
        self.rank = rank

    def __call__(self, graph: torch.fx.graph.Graph) -> None:
        for node in list(graph.nodes):
            if node.op == "call_function" and node.target is torch.ops.aten.mul.Tensor \
                    and isinstance(node.args[0], torch.fx.Node) \
                    and node.args[0].target is torch.ops.aten.relu.default:
                node.args = (node.args[0], float(self.rank + 1))

    def uuid(self) -> str:
        return "fold-rank-v1"


rank = _rank.start()
torch._inductor.config.post_grad_custom_post_pass = FoldRank(rank)
torch.manual_seed(0)
x, w = torch.randn(4, 8), torch.randn(8, 8)
s = torch.tensor(float(rank + 1))
with torch.no_grad():
    out = torch.compile(lambda a, b, c: torch.relu(a @ b) * c + 1)(x, w, s)
_rank.finish(out)
