"""An injected slowdown, for measuring ``perfsuite ab``'s sensitivity (docs/ab.md): loaded only by the
``slow-python`` wrapper's interpreters, never by perfsuite.

After each optimizer step (torch's global step hook: torch's optimizers, bitsandbytes',
DeepSpeed's CPU Adam, transformers' Adafactor), it spins for ``PERFSUITE_SLOWDOWN`` (0.05: 5%)
of the time since the previous step ended, so every step takes that much longer.
``PERFSUITE_SLOWDOWN_OPTIMIZER`` (a class name, e.g. ``Adafactor``) limits it to one optimizer:
one strategy slowed, the others not.

On a GPU the hook first waits for the device (both wrappers): the host runs ahead of the
GPU's queue, so a spin on the host alone would only use up slack and slow nothing on a
GPU-bound step. With the wait, the time since the previous step is the step's, and the spin
adds to it. The wait costs both sides the same.

``PERFSUITE_SLOWDOWN_CONTROL=1`` (the ``control-python`` wrapper, for ``--base``) does all of
that but the spin: the same early torch import and the same hook, so that the two sides
differ by the spin alone. Without it, the wrapper by itself made ``tiny-bert-zero2_offload``
2% faster (docs/ab.md), which hid part of the injected slowdown.
"""

import os
import time

_FRACTION = float(os.environ.get("PERFSUITE_SLOWDOWN", "0") or 0)
_ONLY = os.environ.get("PERFSUITE_SLOWDOWN_OPTIMIZER") or None
_SPINS = not os.environ.get("PERFSUITE_SLOWDOWN_CONTROL")

if _FRACTION > 0:
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    _last = [None]

    def _device_of(optimizer):
        for group in optimizer.param_groups:
            for param in group["params"]:
                return param.device
        return None

    def _spin(optimizer, args, kwargs):  # noqa: ARG001 - the hook's signature
        if _ONLY is not None and type(optimizer).__name__ != _ONLY:
            return
        device = _device_of(optimizer)
        if device is not None and device.type == "cuda":
            torch.cuda.synchronize(device)
        now = time.perf_counter()
        if _last[0] is not None and _SPINS:
            until = now + _FRACTION * (now - _last[0])
            while time.perf_counter() < until:
                pass
        _last[0] = time.perf_counter()

    register_optimizer_step_post_hook(_spin)
