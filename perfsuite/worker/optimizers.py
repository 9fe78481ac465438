"""The optimizers strategies name, built with the HF Trainer's defaults (no weight decay).

Each comes from the library made for it: torch (AdamW, fused or not), transformers
(Adafactor), bitsandbytes (8-bit and paged AdamW, 8-bit Lion), lion-pytorch (Lion),
galore-torch (GaLore AdamW). Only the parameters that train are handed over, so a LoRA
model's frozen base weights get no state.
"""

from __future__ import annotations

from typing import Any

import torch

LION_LR_SCALE = 1 / 3
"""Lion's authors recommend a 3-10x smaller learning rate than AdamW's; the mildest is used."""
LION_BETAS = (0.9, 0.99)
"""Lion's recommended betas (the HF Trainer passes AdamW's 0.999 instead)."""

GALORE_RANK = 128
"""GaLore's published rank for models of bert-base's size and up."""
GALORE_MIN_DIM = 32
"""Linear layers narrower than this (a classification head's few labels) are not projected."""
GALORE_UPDATE_PROJ_GAP = 200
GALORE_SCALE = 0.25


def galore_rank(shapes: list[tuple[int, ...]]) -> int:
    """The rank GaLore projects to: 128, or a quarter of the smallest targeted dimension below that.

    A tiny model's 64-wide matrices cannot take rank 128; a quarter keeps the same idea
    (moments several times smaller than the weight) at any size.
    """
    smallest = min(min(shape) for shape in shapes)
    return max(1, min(GALORE_RANK, smallest // 4))


def galore_targets(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The 2-D weights of the trainable linear layers at least :data:`GALORE_MIN_DIM` wide:
    what GaLore projects (the attention and MLP matrices; not embeddings, biases or a
    classification head's few outputs)."""
    get_embeddings = getattr(model, "get_input_embeddings", None)
    tied = getattr(get_embeddings(), "weight", None) if callable(get_embeddings) else None
    return [
        module.weight  # type: ignore[misc]
        for module in model.modules()
        if isinstance(module, torch.nn.Linear)
        and module.weight.requires_grad
        and min(module.weight.shape) >= GALORE_MIN_DIM
        and module.weight is not tied  # an output head sharing the embedding matrix
    ]


def build_optimizer(name: str, model: torch.nn.Module, lr: float) -> torch.optim.Optimizer:
    """The optimizer ``name`` over ``model``'s trainable parameters."""
    params = [p for p in model.parameters() if p.requires_grad]
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    if name == "adamw_fused":
        return torch.optim.AdamW(params, lr=lr, weight_decay=0.0, fused=True)
    if name == "adafactor":
        from transformers.optimization import Adafactor

        # The HF Trainer's optim="adafactor" settings: a fixed learning rate.
        return Adafactor(params, lr=lr, scale_parameter=False, relative_step=False, warmup_init=False)  # type: ignore[no-untyped-call]
    if name in ("adamw_8bit", "paged_adamw_8bit", "lion_8bit"):
        import bitsandbytes as bnb

        if name == "lion_8bit":
            return bnb.optim.Lion8bit(params, lr=lr * LION_LR_SCALE, betas=LION_BETAS, weight_decay=0.0)  # type: ignore[attr-defined,no-untyped-call]
        cls = bnb.optim.PagedAdamW8bit if name == "paged_adamw_8bit" else bnb.optim.AdamW8bit  # type: ignore[attr-defined]
        return cls(params, lr=lr, weight_decay=0.0)  # type: ignore[no-any-return,unused-ignore]
    if name == "lion":
        from lion_pytorch import Lion

        return Lion(params, lr=lr * LION_LR_SCALE, betas=LION_BETAS, weight_decay=0.0)  # type: ignore[no-any-return,unused-ignore]
    if name == "galore_adamw":
        return _galore(model, params, lr)
    raise ValueError(f"unknown optimizer {name!r}")


def _galore(model: torch.nn.Module, params: list[torch.nn.Parameter], lr: float) -> torch.optim.Optimizer:
    from galore_torch import GaLoreAdamW

    from perfsuite.core.spec import CaseSkipped

    targets = galore_targets(model)
    if not targets:
        raise CaseSkipped(
            f"GaLore projects nn.Linear weights and {type(model).__name__} has none to project "
            "(GPT-2's layers are Conv1D; the HF Trainer's GaLore refuses it too)"
        )
    chosen = {id(p) for p in targets}
    groups: list[dict[str, Any]] = [
        {"params": [p for p in params if id(p) not in chosen]},
        {
            "params": targets,
            "rank": galore_rank([tuple(p.shape) for p in targets]),
            "update_proj_gap": GALORE_UPDATE_PROJ_GAP,
            "scale": GALORE_SCALE,
            "proj_type": "std",
        },
    ]
    # galore-torch copied transformers' old AdamW, deprecation warning included; its own
    # switch silences exactly that warning. eps 1e-8 matches torch's AdamW (its default is 1e-6).
    return GaLoreAdamW(groups, lr=lr, eps=1e-8, weight_decay=0.0, no_deprecation_warning=True)  # type: ignore[no-any-return]


def state_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Every tensor an optimizer keeps per parameter, including those inside state objects
    (GaLore's projector holds its projection matrix in a Python object, not a tensor entry);
    of a sharded (DTensor) state, this rank's shard."""
    from torch.distributed.tensor import DTensor

    found: list[torch.Tensor] = []
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                found.append(value)
            elif hasattr(value, "__dict__"):
                found += [v for v in vars(value).values() if isinstance(v, torch.Tensor)]
    return [t.to_local() if isinstance(t, DTensor) else t for t in found]


def state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of :func:`state_tensors` (shared storages counted once)."""
    seen: dict[tuple[str, int], int] = {}
    for t in state_tensors(optimizer):
        storage = t.untyped_storage()
        seen[(str(storage.device), storage.data_ptr())] = storage.nbytes()
    return sum(seen.values())
