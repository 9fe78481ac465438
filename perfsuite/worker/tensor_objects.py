"""Which of the garbage collector's objects are tensors: for the memory profile's search for every
live tensor (:mod:`perfsuite.worker.measure`) and the forkserver's frozen ones
(:mod:`perfsuite.worker.frozen`)."""

from __future__ import annotations

import itertools
from typing import Any

import torch


def _subclasses(cls: type) -> set[type]:
    """``cls`` and every class derived from it, directly or not."""
    found = {cls}
    subs: list[type] = type.__subclasses__(cls)
    for sub in subs:
        found |= _subclasses(sub)
    return found


def tensors_among(objects: list[Any]) -> list[torch.Tensor]:
    """The tensors in ``objects`` (the garbage collector's list: up to a few hundred thousand objects)."""
    # By type(), not isinstance(): isinstance reads ``__class__``, which on a deprecated alias
    # such as ``torch.distributed.reduce_op`` raises a FutureWarning into every record. The
    # objects are sifted by iterators that run in C; Python sees the tensors.
    tensor_types = _subclasses(torch.Tensor)
    return list(itertools.compress(objects, map(tensor_types.__contains__, map(type, objects))))
