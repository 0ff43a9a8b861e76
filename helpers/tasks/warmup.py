"""A deep encoder stack trained with and without warm-up (the encoder chapter).

The task reverses a sequence of 12 tokens drawn from 10 symbols: every output
position needs one input position, so only attention can solve it. The model is
an embedding, learned positions, a :class:`~helpers.transformer.TransformerEncoder`
of 12 blocks of width 32, and a readout. :func:`train_stack` trains it with Adam,
a constant learning rate after an optional linear warm-up, the same batches for
every setting of a seed. :func:`shipped_runs` reads the grid that
``scripts/margins.py encoder`` trained: post-LN and pre-LN, with and without warm-up,
over seeds.
"""

from __future__ import annotations

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from helpers.tasks import shipped_table
from helpers.transformer import TransformerConfig, TransformerEncoder

__all__ = ["reversal_batch", "ReversalStack", "train_stack", "shipped_runs"]

VOCAB, LENGTH = 10, 12
RUNS_FILE = "warmup_runs.csv"


def reversal_batch(
    n: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` random sequences and their reversals, each ``(n, 12)``."""
    inputs = torch.randint(VOCAB, (n, LENGTH), generator=generator)
    return inputs, inputs.flip(1)


class ReversalStack(nn.Module):
    """Embedding and learned positions, an encoder stack, a readout."""

    def __init__(
        self, norm_first: bool, num_layers: int = 12, d_model: int = 32
    ):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, d_model)
        self.positions = nn.Parameter(torch.randn(LENGTH, d_model))
        config = TransformerConfig(
            d_model=d_model,
            num_heads=4,
            num_layers=num_layers,
            norm_first=norm_first,
        )
        self.encoder = TransformerEncoder(config)
        self.readout = nn.Linear(d_model, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.readout(self.encoder(self.embed(tokens) + self.positions))


def train_stack(
    norm_first: bool,
    warmup_steps: int,
    seed: int,
    lr: float = 0.005,
    steps: int = 300,
) -> dict:
    """Train a 12-block stack; its loss at every step and its test accuracy."""
    torch.manual_seed(seed)
    model = ReversalStack(norm_first)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    data = torch.Generator().manual_seed(seed)
    losses = []
    for step in range(steps):
        ramp = min(1.0, (step + 1) / warmup_steps) if warmup_steps else 1.0
        for group in optimizer.param_groups:
            group["lr"] = lr * ramp  # linear warm-up, then constant
        inputs, targets = reversal_batch(64, data)
        loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    inputs, targets = reversal_batch(500, torch.Generator().manual_seed(999))
    with torch.no_grad():
        accuracy = (model(inputs).argmax(-1) == targets).float().mean().item()
    return {"losses": losses, "accuracy": accuracy}


def shipped_runs() -> pd.DataFrame:
    """The grid of ``scripts/margins.py encoder``: one row per run (``norm``,
    ``warmup``, ``seed``, ``lr``, ``final_loss``, ``accuracy``, ``numerics``,
    ``machine``, ``command``)."""
    return shipped_table(
        RUNS_FILE,
        f"python scripts/margins.py encoder --out helpers/tasks/{RUNS_FILE}",
    )
