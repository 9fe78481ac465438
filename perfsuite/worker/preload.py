"""Imported once by the worker forkserver, so each case's process starts with these loaded.

Importing torch and transformers' model classes takes seconds; forking a process
that already has them takes milliseconds. Nothing here may start threads or touch a
GPU (a forked child cannot use a CUDA context its parent created).

Warnings raised by these imports are kept in :data:`IMPORT_WARNINGS` and reported
with every case (the forkserver's stderr is the caller's terminal).
"""

from __future__ import annotations

import warnings

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
    import perfsuite.worker.engines.loop  # noqa: F401
    import perfsuite.worker.measure  # noqa: F401
    import perfsuite.worker.run  # noqa: F401
    from perfsuite.core.models import MODELS

    # transformers imports model code lazily; resolve every registered class now.
    for _spec in MODELS.values():
        for _name in (_spec.config_class, _spec.model_class):
            if _name:
                getattr(transformers, _name)
