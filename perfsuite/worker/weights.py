"""A digest of a model's initial weights: what makes two runs' loss curves comparable at all.

A case's weights are its seed's random initialisation (or a pretrained checkpoint). A
change of torch's random generator or of a model's ``_init_weights`` gives every run
other starting weights, and with them another loss curve, however sound the training
step; the digest says so directly, where a loss gate alone would report a divergence
from step 0. It covers every entry of the state dict as built, before any strategy
wraps, quantises or moves the model: its name, dtype, shape and bytes.

xxHash's XXH3-128 (a dependency of ``datasets``, so of perfsuite) reads bert-base's 438 MB
in a few hundredths of a second; the digest names its algorithm, so a future one is never
mistaken for other weights (:func:`perfsuite.core.loss.check_loss` compares digests of one
algorithm only, and only to explain a curve that diverged).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

ALGORITHM = "xxh3_128"


def initial_weights_digest(model: torch.nn.Module) -> str:
    """``xxh3_128:<hex>`` over ``model``'s state dict (tied entries once per name, as the dict lists them)."""
    import torch
    import xxhash

    digest = xxhash.xxh3_128()
    for name, tensor in model.state_dict(keep_vars=False).items():
        flat = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}|{flat.dtype}|{tuple(flat.shape)}|".encode())
        if flat.numel():
            digest.update(memoryview(flat.reshape(-1).view(torch.uint8).numpy()))  # 0-dim too
    return f"{ALGORITHM}:{digest.hexdigest()}"
