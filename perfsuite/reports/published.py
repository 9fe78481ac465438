"""The figures the practitioners' write-ups published, to stand beside ours in a report. Pure data.

Theirs, on their hardware and settings, labelled as such wherever they are shown: they
are context for reading our percentages, never a gate.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Published:
    """One row of a write-up's table: a strategy's time and memory, and each as % of its control."""

    source: str
    """Which write-up (its title) and what they ran."""
    model: str
    strategy: str
    """perfsuite's name for the strategy they measured."""
    their_label: str
    time: str
    memory: str
    time_pct: float | None
    memory_pct: float | None
    relative_to: str = "vanilla"
    """Which of their runs the percentages are of."""


_TRAINER = (
    '"Efficient Training": HF Trainer, bert-base-uncased, batch 32, AG News 1,000 samples × 5 epochs, '
    "a GPU the write-up does not name; memory is nvidia-smi's 'GPU occupation' (reserved + CUDA context)"
)
_XLMR = (
    '"Training large model with your GPU": XLM-R on one 24 GB Quadro RTX 6000, Jigsaw toxic comments, time per epoch, '
    "memory is nvidia-smi's VRAM usage"
)

PUBLISHED: tuple[Published, ...] = (
    Published(_TRAINER, "bert-base-uncased", "vanilla", "Vanilla", "174 s", "7.00 GB", 100, 100),
    Published(_TRAINER, "bert-base-uncased", "fp16", "FP 16", "69 s", "5.47 GB", 40, 78),
    Published(_TRAINER, "bert-base-uncased", "grad_accum", "Gradient Accumulation", "182 s", "6.29 GB", 105, 90),
    Published(_TRAINER, "bert-base-uncased", "grad_ckpt", "Gradient Checkpointing", "239 s", "3.54 GB", 137, 51),
    Published(_TRAINER, "bert-base-uncased", "adafactor", "AdaFactor Optimization", "179 s", "6.72 GB", 103, 96),
    Published(_TRAINER, "bert-base-uncased", "all", "All Applied", "85 s", "2.91 GB", 49, 41),
    Published(_XLMR, "xlm-roberta-base", "vanilla", "XLM-R Base, batch 8", "70 min", "12.28 GB", 100, 100),
    Published(_XLMR, "xlm-roberta-base", "fp16", "XLM-R Base 1 (fp16), batch 8", "50 min", "10.95 GB", 71, 89),
    Published(_XLMR, "xlm-roberta-large", "vanilla", "XLM-R Large, batch 8", "—", "OOM at 24 GB", None, None),
    Published(_XLMR, "xlm-roberta-large", "fp16", "XLM-R Large 1 (fp16)", "100 min", "23.5 GB", None, None),
    Published(
        _XLMR,
        "xlm-roberta-large",
        "fp16+grad_ckpt",
        "XLM-R Large 2 (fp16 + checkpointing)",
        "110 min",
        "11.8 GB",
        110,
        50,
        relative_to="their fp16 run (vanilla did not fit)",
    ),
)

ADAM_ARITHMETIC = (
    '"Model Training Strategies": bert-large (335M parameters) in fp32 needs 1.35 GB of weights, as much again for '
    "gradients and 2 × 1.35 GB for AdamW's two moments: optimizer state = 2 × parameters"
)
"""The write-up's memory arithmetic, checked against each AdamW case's measured breakdown."""
