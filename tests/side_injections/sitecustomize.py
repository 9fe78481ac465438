"""Regressions injected into one side of ``perfsuite ab`` (the ``python`` wrapper beside this file
loads it at its interpreter's start), for the explanations' tests: each named in
``PERFSUITE_SIDE_INJECT`` (comma-separated) changes every training step of every case the side runs.

- ``matmul``: one more 256×256 matmul after each optimizer step (``aten::mm``, one call a step);
- ``sleep``: the model's forward hook :func:`_slow_hook` sleeps 10 ms (``time.sleep``), once a forward;
- ``buffer``: a 50 MiB float32 buffer, ``injected_cache``, registered on the model at its first forward;
- ``loss``: the model's loss multiplied by 1.01 (every gradient too).

The model is the first module whose forward runs in the process.
"""

from __future__ import annotations

import os
import time
from typing import Any

_KINDS = set(filter(None, os.environ.get("PERFSUITE_SIDE_INJECT", "").split(",")))

if _KINDS:
    import torch
    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
    from torch.optim.optimizer import register_optimizer_step_post_hook

    _ROOT: list[torch.nn.Module] = []
    _SQUARE = torch.ones(256, 256)

    def _find_root(module: torch.nn.Module, args: Any) -> None:
        if not _ROOT:
            _ROOT.append(module)
            if "buffer" in _KINDS:
                module.register_buffer("injected_cache", torch.zeros(50 * 2**20 // 4))

    def _slow_hook(module: torch.nn.Module, args: Any, output: Any) -> Any:
        if "sleep" in _KINDS and _ROOT and module is _ROOT[0]:
            time.sleep(0.01)
        return output

    def _scaled_loss(module: torch.nn.Module, args: Any, output: Any) -> Any:
        if "loss" in _KINDS and _ROOT and module is _ROOT[0] and getattr(output, "loss", None) is not None:
            output["loss"] = output["loss"] * 1.01
        return output

    def _extra_matmul(optimizer: Any, args: Any, kwargs: Any) -> None:
        torch.mm(_SQUARE, _SQUARE)

    register_module_forward_pre_hook(_find_root)
    register_module_forward_hook(_slow_hook)
    register_module_forward_hook(_scaled_loss)
    if "matmul" in _KINDS:
        register_optimizer_step_post_hook(_extra_matmul)
