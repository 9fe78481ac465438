"""A model of this project's own for perfsuite to guard: a plain torch module built from a seed, and
the batch each training step takes. pyproject.toml's [tool.perfsuite.models.example-mlp] names both
(`perfsuite init --example` wrote them; make them yours).
"""

from __future__ import annotations

import torch
from torch import nn

VOCAB = 1024
CLASSES = 4


class BagOfTokens(nn.Module):
    """Token embeddings, a hidden layer applied at every position, mean-pooled into class logits."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.hidden = nn.Linear(width, width)
        self.head = nn.Linear(width, CLASSES)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.hidden(self.embed(tokens)))  # (batch, seq_len, width)
        logits: torch.Tensor = self.head(hidden.mean(dim=1))  # (batch, classes)
        return logits


def build(seed: int, width: int = 256) -> BagOfTokens:
    """The model perfsuite measures; its weights are drawn from ``seed`` (torch is seeded with it too)."""
    torch.manual_seed(seed)
    return BagOfTokens(width)


def make_batch(batch_size: int, seq_len: int, step: int, seed: int) -> dict[str, torch.Tensor]:
    """Batch number ``step``: what the model reads and what the loss needs, the same for the same arguments."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    tokens = torch.randint(VOCAB, (batch_size, seq_len), generator=generator)
    return {"tokens": tokens, "labels": tokens[:, 0] % CLASSES}
