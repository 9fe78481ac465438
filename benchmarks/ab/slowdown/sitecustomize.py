"""An injected slowdown, for measuring ``perfsuite ab``'s sensitivity (docs/ab-sensitivity.md): loaded only by the
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

``PERFSUITE_SLOWDOWN_KERNEL=1`` has a GPU spin instead of the host: a kernel on the step's
stream (``torch.cuda._sleep``, the clock cycles for the same time at the rate measured on the
first step), and the host waits for it. The step takes as much longer, and the kernel is an op
that ``perfsuite ab --explain``'s GPU table can name. On a CPU nothing changes.

``PERFSUITE_SLOWDOWN_CONTROL=1`` (the ``control-python`` wrapper, for ``--base``) does all of
that but the spin: the same early torch import and the same hook, so that the two sides
differ by the spin alone. Without it, the wrapper by itself made ``tiny-bert-zero2_offload``
2% faster (docs/ab-sensitivity.md), which hid part of the injected slowdown.
"""

import os
import time

_FRACTION = float(os.environ.get("PERFSUITE_SLOWDOWN", "0") or 0)
_ONLY = os.environ.get("PERFSUITE_SLOWDOWN_OPTIMIZER") or None
_SPINS = not os.environ.get("PERFSUITE_SLOWDOWN_CONTROL")
_KERNEL = os.environ.get("PERFSUITE_SLOWDOWN_KERNEL") == "1"

if _FRACTION > 0:
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    _last = [None]
    _cycles_per_s = {}  # per GPU: the clock rate that a kernel spin runs at, measured once

    def _rate(device):
        """The GPU's spin rate in cycles a second, from the second of two spins of ten million
        cycles (the first loads the kernel), timed on the GPU by CUDA events."""
        if device not in _cycles_per_s:
            for _ in range(2):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                torch.cuda._sleep(10_000_000)
                end.record()
                end.synchronize()
            _cycles_per_s[device] = 10_000_000 / (start.elapsed_time(end) / 1000)
        return _cycles_per_s[device]

    def _wait(device, seconds):
        """Spin for ``seconds``: on the GPU, as a kernel the host waits for (with
        ``PERFSUITE_SLOWDOWN_KERNEL``), else on the host; nothing but the wait in the control."""
        if device is not None and device.type == "cuda" and _KERNEL:
            with torch.cuda.device(device):  # the step's GPU, on its current stream
                rate = _rate(device)  # in the control too: the same calibration on both sides
                if _SPINS and seconds > 0:
                    torch.cuda._sleep(int(seconds * rate))
                torch.cuda.synchronize(device)
            return
        if _SPINS:
            until = time.perf_counter() + seconds
            while time.perf_counter() < until:
                pass

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
        _wait(device, 0.0 if _last[0] is None else _FRACTION * (now - _last[0]))
        _last[0] = time.perf_counter()

    register_optimizer_step_post_hook(_spin)
