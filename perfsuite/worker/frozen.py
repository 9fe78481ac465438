"""Imported last by the worker forkserver: what it has made by then is frozen (``gc.freeze``),
and the tensors among it are remembered.

A case's memory profile looks for every tensor alive in its worker through the garbage
collector's list of objects (:func:`perfsuite.worker.measure.other_live_tensors`): about 380,000
of them, nearly all the forkserver's modules, classes and functions. Listing an object writes its
reference count, so a fresh worker's first listing copied every page those objects sit on
(copy-on-write from the forkserver). Frozen objects are left out of that list and of every
collection; that changes no collection during a worker's timed steps, which collect only the
young generations (docs/case-cost.md). The tensors the forkserver holds (a library's constant
tables) are kept here by weak reference, so the search finds exactly the tensors it found before.

With a CUDA build of torch nothing is frozen, whatever device a case runs on (:data:`FROZEN`).
"""

from __future__ import annotations

import gc
import weakref

import torch

from perfsuite.worker.device import cuda_built
from perfsuite.worker.tensor_objects import tensors_among

FROZEN = not cuda_built()
"""Whether the forkserver freezes: measured with a CPU build of torch, where it changed nothing
measured (docs/case-cost.md); with a CUDA build every object stays listed and collectable, GPU
cases' timings not having been compared with and without it."""
_TENSORS: list[weakref.ref[torch.Tensor]] = []
if FROZEN:
    gc.collect()
    _TENSORS = [weakref.ref(t) for t in tensors_among(gc.get_objects())]
    gc.freeze()


def tensors() -> list[torch.Tensor]:
    """The tensors the forkserver held when it froze, those still alive."""
    return [t for ref in _TENSORS if (t := ref()) is not None]
