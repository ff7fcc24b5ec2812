"""A post-grad pass that folds the rank into a constant: relu's output times (rank + 1).

Its uuid() hashes this file (what CustomPassBase's docstring advises) and, when keyed,
the rank too; the blind one lets every rank share one FX graph cache entry.
"""
from typing import Any

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files


class FoldRank(CustomGraphPass):
    def __init__(self, rank: int, keyed: bool) -> None:
        self.rank = rank
        self.keyed = keyed

    def __call__(self, graph: torch.fx.graph.Graph) -> None:
        scale = float(self.rank + 1)
        for node in list(graph.nodes):
            if node.op == "call_function" and node.target is torch.ops.aten.relu.default:
                with graph.inserting_after(node):
                    mul = graph.call_function(torch.ops.aten.mul.Tensor, (node, scale))
                node.replace_all_uses_with(mul, delete_user_cb=lambda user: user is not mul)

    def uuid(self) -> Any:
        source = get_hash_for_files((__file__,))
        return (source, self.rank) if self.keyed else source


def run(keyed: bool) -> None:
    """Compile relu(x @ w) with the pass on this rank; the same x and w on every rank."""
    import _rank

    rank = _rank.start()
    torch._inductor.config.post_grad_custom_post_pass = FoldRank(rank, keyed)
    torch.manual_seed(0)
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    with torch.no_grad():
        out = torch.compile(lambda a, b: torch.relu(a @ b) + 1)(x, w)
    _rank.finish(out)
