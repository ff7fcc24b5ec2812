"""A tiny 'model repository': two small models."""
import torch


class MLP(torch.nn.Module):
    def __init__(self, width: int = 32):
        super().__init__()
        self.l1 = torch.nn.Linear(width, width)
        self.l2 = torch.nn.Linear(width, 8)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))


class Scorer(torch.nn.Module):
    """Served by code that forgets torch.no_grad()."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 4)

    def forward(self, x):
        return torch.tanh(self.proj(x)).sin()
