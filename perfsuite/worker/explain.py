"""An explanation run of one case, inside its worker (``perfsuite ab``'s explanations): the case
built as its timed runs build it, the same steps on the same data, then what a verdict's cause
needs (:class:`~perfsuite.core.explain.records.ExplainAsk`): a few steps under the profiler, the
gradients of the steps up to where two loss curves part, the tensor inventory.

Order: the warm-up steps (and any further steps up to ``grads_until``), each recorded
(:class:`~perfsuite.worker.inventory.StepRecorder`); the profiled steps; for the memory, one step
under MemTracker following every module (the activations each forward keeps), then one more step
whose gradients are read before the optimizer steps, then the inventory (and on a GPU the allocator's
record of that step). Nothing here is timed for a verdict.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from typing import Any

from perfsuite.core.explain.initial import ParamStat
from perfsuite.core.explain.records import ExplainAsk, ExplainRecord, StepFacts
from perfsuite.core.explain.traces import allocation_sites
from perfsuite.core.spec import CaseSkipped, CaseSpec


def steps_needed(spec: CaseSpec, ask: ExplainAsk) -> int:
    """Optimizer steps an explanation run takes: the recorded ones, the profiler's warm-up step and
    its steps, the memory's two (one under MemTracker, one for the inventory)."""
    recorded = max(spec.warmup_steps, ask.grads_until + 1, 1)
    return recorded + (ask.profile_steps + 1 if ask.profile_steps else 0) + (2 if ask.inventory else 0)


def explain_case(spec: CaseSpec, ask: Mapping[str, Any]) -> dict[str, Any]:
    """The worker's target (:func:`perfsuite.worker.process.run_isolated`): the record of an
    explanation run, as ``{"status": "ok", "explain": ExplainRecord.as_json()}``."""
    import torch

    from perfsuite.worker.build import build
    from perfsuite.worker.engines.driven import Driven
    from perfsuite.worker.inventory import StepRecorder, gradients_before_step, inventory
    from perfsuite.worker.measure import memory_breakdown
    from perfsuite.worker.step_profile import profile_steps

    wanted = ExplainAsk.from_json(ask)
    if spec.launches_ranks:
        raise CaseSkipped("an explanation runs one process; a case of several ranks is not explained")
    started = time.perf_counter()
    if spec.threads is not None:
        torch.set_num_threads(spec.threads)
    # The Trainer stops after the steps it was built for: enough for the explanation's. The data
    # and the constant learning rate do not depend on the step count.
    extra = steps_needed(spec, wanted) - spec.warmup_steps
    # A copy that keeps the spec's resolved model: dataclasses.replace would resolve its name again, in a
    # worker whose registry never read the project's declarations (a team's own model is not there).
    longer = copy.copy(spec)
    object.__setattr__(longer, "steps", max(spec.steps, extra))
    object.__setattr__(longer, "profile", False)
    built = build(longer)
    engine = Driven(built.engine, device_type=built.device.type, tokens=built.token_positions)
    initial = initial_stats(engine.model)
    notes: list[str] = []
    steps: list[StepFacts] = []
    recorder = StepRecorder(engine.model, lambda: engine.inner_optimizer, stepped=lambda: engine.optimizer)
    try:
        for index in range(max(spec.warmup_steps, wanted.grads_until + 1, 1)):
            recorder.begin(grads=index <= wanted.grads_until)
            out = engine.step()
            steps.append(recorder.end(out.loss))
    finally:
        recorder.close()
    profile = None
    if wanted.profile_steps:
        profile = profile_steps(engine, built.device, wanted.profile_steps, wanted.trace)
        if not any(profile.frames):
            notes.append("the profiler recorded no host events")
    tensors: list[Any] = []
    sites: list[Any] = []
    kept: dict[str, int] = {}
    if wanted.inventory:
        followed = memory_breakdown(engine, module_peaks=True)  # a step under MemTracker, every module followed
        if followed.get("error"):
            notes.append(str(followed["error"]).splitlines()[0])
        kept = followed.get("forward_activations") or {}
        with built.device.allocation_history() as history, gradients_before_step(engine.model) as gradients:
            engine.step()
        tensors = inventory(engine.model, engine.inner_optimizer, gradients, holders={"engine": built.engine})
        if history.get("error"):
            notes.append(history["error"])
        sites = allocation_sites(history.get("segments") or ())
    record = ExplainRecord(
        initial_weights=built.initial_weights,
        num_parameters=built.num_parameters,
        steps=tuple(steps),
        initial=initial,
        profile=profile,
        tensors=tuple(tensors),
        allocation_sites=tuple(sites),
        forward_activations=kept,
        wall_s=time.perf_counter() - started,
        notes=tuple(notes),
    )
    from perfsuite.worker import teardown

    if teardown.deferring() and spec.engine_spec is None:
        teardown.keep(built.engine)  # left to the worker's exit, as a timed run's is
    else:
        built.engine.close()
    return {
        "model": spec.model,
        "strategy": spec.strategy,
        "engine": spec.engine,
        "world_size": spec.world_size,
        "status": "ok",
        "error": None,
        "explain": record.as_json(),
    }


def initial_stats(model: Any) -> tuple[ParamStat, ...]:
    """Each parameter's size, mean, standard deviation and values' digest before the first step (what a
    model started from)."""
    import torch
    import xxhash

    stats = []
    with torch.no_grad():
        for name, param in model.named_parameters():
            values = param.detach().float()
            std = float(values.std()) if values.numel() > 1 else 0.0
            digest = xxhash.xxh3_64_hexdigest(values.cpu().contiguous().numpy().tobytes())
            mean = float(values.mean()) if values.numel() else 0.0
            stats.append(ParamStat(name, values.numel(), mean, std, digest))
    return tuple(stats)
