"""Imported once by the worker forkserver, so each case's process starts with these loaded.

Importing torch and transformers' model classes takes seconds; forking a process
that already has them takes milliseconds. The session's cases add what they need
(:func:`perfsuite.core.preloads.preload_for`). Nothing here may start threads or touch a
GPU (a forked child cannot use a CUDA context its parent created).

Warnings raised by these imports are kept in :data:`IMPORT_WARNINGS`, and what the
session's extra imports print in :data:`IMPORT_OUTPUT`, both reported with every case
(the forkserver's stderr is the caller's terminal).
"""

from __future__ import annotations

import importlib
import os
import warnings

from perfsuite.core.preloads import CPU_ADAM_ENV, CUDA_AT_IMPORT, ENV, MODEL_CLASSES_ENV
from perfsuite.worker.capture import captured_output


def import_extras(names: list[str], *, gpu: bool) -> list[str]:
    """Import ``names`` (empty ones ignored) and return those imported; with ``gpu``, none that
    would create a CUDA context (:data:`perfsuite.core.preloads.CUDA_AT_IMPORT`). A package that
    is not installed is left to the case, which skips itself saying what to install."""
    imported = []
    for name in filter(None, names):
        if gpu and name in CUDA_AT_IMPORT:
            continue
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        imported.append(name)
    return imported


with warnings.catch_warnings(record=True) as IMPORT_WARNINGS:
    warnings.simplefilter("always")
    import accelerate  # noqa: F401
    import numpy  # noqa: F401
    import threadpoolctl  # noqa: F401
    import torch  # noqa: F401
    import transformers

    import perfsuite.worker.calibrate  # noqa: F401
    import perfsuite.worker.data  # noqa: F401
    import perfsuite.worker.device  # noqa: F401
    from perfsuite.core.engines import ENGINES, OWN_ENGINES

    importlib.import_module(OWN_ENGINES[ENGINES[0]].module)  # the default engine's (the others': preloads)
    import perfsuite.worker.flop_cache
    import perfsuite.worker.measure  # noqa: F401
    import perfsuite.worker.run  # noqa: F401
    from perfsuite.core.models import MODELS

    perfsuite.worker.flop_cache.stack()  # the libraries' versions and perfsuite's source, read once

    # transformers imports model code lazily; resolve every registered class now, unless no case
    # of the session builds a transformers model (perfsuite.core.preloads.MODEL_CLASSES_ENV).
    for _spec in MODELS.values() if os.environ.get(MODEL_CLASSES_ENV) != "0" else ():
        for _name in (_spec.config_class, _spec.model_class):
            if _name:
                getattr(transformers, _name)

    # What this session's cases import beyond the above (perfsuite.core.preloads), each once
    # here instead of in every worker; with a CUDA build of torch none that asks CUDA about the
    # GPUs (nor may this: device.cuda_built asks nothing). What they print (DeepSpeed logs its
    # accelerator) goes with every case's output, as it did when each worker imported them,
    # not onto the caller's terminal.
    with captured_output() as _printed:
        PRELOADED = import_extras(os.environ.get(ENV, "").split(","), gpu=perfsuite.worker.device.cuda_built())
        if "deepspeed" in PRELOADED:
            from perfsuite.worker.engines.deepspeed import deepspeed_asks_once, load_cpu_adam

            deepspeed_asks_once(now=True)
            if os.environ.get(CPU_ADAM_ENV) == "1":
                load_cpu_adam()
    IMPORT_OUTPUT = _printed["output"]
