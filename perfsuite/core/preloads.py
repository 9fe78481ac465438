"""What a session's forkserver imports for its cases, beyond torch, transformers and accelerate. Pure.

Every worker is forked from one forkserver, so what the forkserver imported, each worker has
for free; what it did not, each worker of a case that needs it imports again (bitsandbytes,
peft, the Trainer and ``transformers.optimization`` about a second each on a 2-core CPU, 3.5 s
on a GPU machine's host). :func:`preload_modules` names what the given cases need; the
forkserver imports those of them that are installed (:mod:`perfsuite.worker.preload`). The
caller names its cases with :func:`preload_for` before its first worker starts (the pytest
session at collection, ``perfsuite run``, ``perfsuite ab`` before starting its sides).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from perfsuite.core.engines import ENGINES, OWN_ENGINES
from perfsuite.core.spec import CaseSpec
from perfsuite.core.strategies import OPTIONAL_PACKAGES

ENV = "PERFSUITE_PRELOAD"
"""The variable that carries the module names to the forkserver (comma-separated)."""
MODEL_CLASSES_ENV = "PERFSUITE_PRELOAD_MODEL_CLASSES"
"""``0`` when none of the session's cases builds a transformers model (a project's own models
only): its forkserver then leaves transformers' model classes unresolved, 1.4 s of its 2.8 s boot
on a 2-core CPU, which a refresh pays once per repeat."""
CPU_ADAM_ENV = "PERFSUITE_PRELOAD_CPU_ADAM"
"""``1`` when a case offloads its optimizer, which DeepSpeed then builds as its CPU Adam: a
forkserver that preloads DeepSpeed (with a CPU build of torch, :data:`CUDA_AT_IMPORT`) loads
that op (:func:`perfsuite.worker.engines.deepspeed.load_cpu_adam`), compiling it first on a
machine that has not (30 s on a 2-core CPU), so that no case compiles it beside another's timed
steps and every worker starts with it loaded."""

NVML_ENV = "PERFSUITE_PRELOAD_NVML"
"""``1``: with a CUDA build of torch, the forkserver imports the :data:`CUDA_AT_IMPORT` modules the
session's cases need too, under torch's NVML-based CUDA check (``PYTORCH_NVML_BASED_CUDA_CHECK=1``:
``torch.cuda.is_available()`` answered without a CUDA context). Each is imported first in a child
forked from the forkserver; those whose import started CUDA there
(:func:`perfsuite.worker.device.cuda_started`) are left to the workers, saying so in every case's
output, and the rest imported in the forkserver, each checked again after. Should one start CUDA
there all the same, it imports no more, and every GPU case forked from it fails, naming it. Off
unless set, until a GPU has shown what it saves (``benchmarks/gpu/run.sh nvml-preload``)."""

CUDA_AT_IMPORT = frozenset(
    {
        "transformers.optimization",
        *(e.module for e in OWN_ENGINES.values() if e.cuda_at_import),
        *(p.module for p in OPTIONAL_PACKAGES if p.cuda_at_import),
    }
)
"""Modules whose import asks CUDA about the GPUs: bitsandbytes reads every GPU's compute
capability (so do peft, galore and transformers' integrations, which import it), DeepSpeed
detects its accelerator (:attr:`perfsuite.core.strategies.OptionalPackage.cuda_at_import`), and so
does the Trainer engine's module, which imports transformers' Trainer.
Either initialises CUDA in the forkserver, and a worker forked from it cannot use CUDA. Where
torch is a CUDA build the forkserver leaves them to the workers."""


def preload_modules(specs: Iterable[CaseSpec]) -> tuple[str, ...]:
    """The modules ``specs`` import beyond the forkserver's base set, in a stable order."""
    names: list[str] = []
    for spec in specs:
        strategy = spec.strategy_spec
        names += strategy.requires
        if strategy.optimizer == "adafactor":
            names.append("transformers.optimization")
        if spec.engine in OWN_ENGINES and spec.engine != ENGINES[0]:  # the default's is in the base set
            names.append(OWN_ENGINES[spec.engine].module)
    # The Trainer engine's module imports transformers.trainer, and with it datasets, pandas and
    # pyarrow (0.37 s a worker on a 2-core CPU). pyarrow's import starts jemalloc's background
    # thread; jemalloc takes its own locks around a fork (pthread_atfork), so the forkserver
    # still forks its workers safely.
    return tuple(sorted(set(names)))


def preload_environ(specs: Iterable[CaseSpec]) -> dict[str, str]:
    """The variables that have a forkserver preload what ``specs`` need."""
    specs = list(specs)
    transformers = not specs or any(spec.model_spec.factory is None for spec in specs)
    offload = any(spec.strategy_spec.offload_optimizer for spec in specs)
    return {
        ENV: ",".join(preload_modules(specs)),
        MODEL_CLASSES_ENV: "1" if transformers else "0",
        CPU_ADAM_ENV: "1" if offload else "0",
    }


def preload_for(specs: Iterable[CaseSpec]) -> tuple[str, ...]:
    """Have the forkservers started from now on (this process's, and those of processes it
    starts) import what ``specs`` need; returns those names. A forkserver already running keeps
    what it has: a worker imports whatever else its case needs itself."""
    environ = preload_environ(specs)
    os.environ.update(environ)
    return tuple(filter(None, environ[ENV].split(",")))
