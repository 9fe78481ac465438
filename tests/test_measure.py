"""MemTracker on models with frozen parameters (the upstream bug, and the narrow way around it);
the garbage-collector walk for other live tensors; the profile's MemTracker without per-module peaks,
and the FLOPs counted in its step."""

from __future__ import annotations

import contextlib
import gc
import warnings
from collections.abc import Iterator
from typing import Any, cast

import pytest
import torch

from perfsuite.worker.measure import frozen_parameters_take_no_grad_hooks


def _partly_frozen() -> tuple[torch.nn.Sequential, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    model[0].requires_grad_(False)  # a frozen base, as LoRA leaves it
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
    return model, optimizer


def _tracked_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    from torch.distributed._tools.mem_tracker import MemTracker

    tracker = MemTracker()
    tracker.track_external(model, optimizer)
    with tracker:
        model(torch.randn(8, 32)).sum().backward()
        optimizer.step()
    peak = tracker.get_tracker_snapshot("peak")
    return int(next(iter(peak.values()))["Total"])


@pytest.mark.xfail(
    strict=True,
    raises=RuntimeError,
    reason="upstream: torch.distributed._tools.mem_tracker.MemTracker (torch 2.5 through 2.13.0, at least) "
    "registers a gradient hook on every parameter of each module it enters, frozen ones included, and torch "
    "raises 'cannot register a hook on a tensor that doesn't require gradient'; no upstream issue found in "
    "the pytorch tracker as of 2026-11. perfsuite.worker.measure.frozen_parameters_take_no_grad_hooks works around "
    "it; when this test passes (XPASS fails it), drop the workaround.",
)
def test_memtracker_follows_a_model_with_frozen_parameters() -> None:
    with warnings.catch_warnings():
        # The failing pre-hook leaves ModTracker's post-hook to fail too; torch reports that as a warning.
        warnings.filterwarnings("ignore", message="global module forward hook", category=UserWarning)
        _tracked_step(*_partly_frozen())


def test_with_the_workaround_memtracker_counts_the_trainable_parameters_state() -> None:
    model, optimizer = _partly_frozen()
    with frozen_parameters_take_no_grad_hooks():
        peak = _tracked_step(model, optimizer)
    assert peak > 0
    assert torch.Tensor.register_hook.__name__ == "register_hook"  # restored
    weight = cast(torch.Tensor, model[0].weight)
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        weight.register_hook(lambda g: g)  # type: ignore[no-untyped-call]  # outside it, torch's check is back
    assert all(p.grad is None for p in model[0].parameters())


def test_the_walk_for_other_live_tensors_finds_them_without_touching_deprecated_aliases() -> None:
    """torch 2.11 and 2.13 warn on any attribute read of ``torch.distributed.reduce_op``, and
    ``isinstance`` reads ``__class__``: with it, every record carried that FutureWarning."""
    import torch.distributed  # noqa: F401  (the alias lives there)

    from perfsuite.worker.measure import other_live_tensors

    held = torch.arange(7.0)
    known = torch.ones(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = other_live_tensors([known])
    assert any(t is held for t in found)
    assert all(t.untyped_storage().data_ptr() != known.untyped_storage().data_ptr() for t in found)


@pytest.fixture(scope="module")
def steady_engine() -> Any:
    """tiny-bert accumulating gradients over checkpointed activations, past its warm-up: where
    MemTracker's module bookkeeping does most (modules run again in the backward, and the module
    stats are cleared between micro-batches). Its profiled steps are compared with each other."""
    from perfsuite.core.spec import tier_spec
    from perfsuite.worker.build import build
    from perfsuite.worker.engines.driven import Driven

    torch.set_num_threads(1)
    spec = tier_spec("tiny-bert", "grad_accum+grad_ckpt")
    built = build(spec)
    engine = Driven(built.engine, device_type="cpu", tokens=built.batch_size * built.seq_len, where=spec.id)
    for _ in range(spec.warmup_steps):
        engine.step()
    return engine


def _profiled(engine: Any, *variants: dict[str, Any]) -> list[dict[str, object]]:
    """One profiled step per variant (the keyword arguments of
    perfsuite.worker.measure.memory_breakdown, and ``watch``: a perfsuite.worker.reach.Watch around
    the step), one after another.

    What else is alive in this process (what earlier tests in this worker left) counts as other
    live tensors in every step. It is held here until the last step, so that none of it is freed
    between two steps being compared: once, in CI, 2176 bytes of it were, between the first and
    the third, and the run read as no steady state.
    """
    from perfsuite.worker.measure import _model_and_optimizer_tensors, memory_breakdown, other_live_tensors

    gc.collect()  # what earlier tests left for the collector would count as other live tensors
    held = other_live_tensors(_model_and_optimizer_tensors(engine))
    found = []
    for variant in variants:
        kwargs = dict(variant)
        if (watch := kwargs.pop("watch", None)) is not None:
            engine.watch_next_step(watch.watching())  # as the run asks it: around the profile's step
        gc.collect()  # and what the step before left
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found.append(memory_breakdown(engine, **kwargs))
    del held
    return found


@pytest.mark.cpu
def test_keeping_only_the_process_peak_gives_memtrackers_own_figures(steady_engine: Any) -> None:
    """The profile skips MemTracker's per-module peaks. Three steps of one run in its steady
    state, profiled with MemTracker as it comes, without the module peaks, and as it comes
    again, have the same peak, split and other live tensors to the byte. The run accumulates
    gradients (the module stats are cleared between micro-batches) and checkpoints activations
    (modules run again in the backward): where MemTracker's module bookkeeping does most."""
    full, lean, full_again = _profiled(steady_engine, *({"module_peaks": m} for m in (True, False, True)))
    assert "error" not in full
    assert full == full_again, "not a steady state: the comparison says nothing"
    assert full.pop("forward_activations")  # what following every module adds: each forward's activations
    assert lean == full


@pytest.mark.cpu
def test_flops_counted_in_the_profiles_step_are_flopcountermodes_and_leave_its_peak(steady_engine: Any) -> None:
    """Three profiled steps in the steady state: without counts, with them, without again. The
    peak, its split and the other live tensors are the same to the byte (FlopCounterMode as it
    comes, with its module hooks, kept this run's checkpointed activations alive); the counts
    equal FlopCounterMode's own, hooks and all, on the next step (a fixed-shape case: every step
    runs the same ops)."""
    from torch.utils.flop_counter import FlopCounterMode

    from perfsuite.worker.measure import MatmulDtypes, StepCounts

    counts = StepCounts()
    plain, counted, plain_again = _profiled(steady_engine, *({"counts": c} for c in (None, counts, None)))
    assert "error" not in plain
    assert plain == plain_again, "not a steady state: the comparison says nothing"
    assert counted == plain

    as_it_comes, dtypes = FlopCounterMode(display=False), MatmulDtypes()

    @contextlib.contextmanager
    def hooked() -> Iterator[None]:
        with as_it_comes, dtypes:
            yield

    steady_engine.step(within=hooked())
    result = counts.result()
    assert result["flops_per_step"] == as_it_comes.get_total_flops() > 0
    assert result["matmul_dtypes"] == dict(dtypes.counts)
    assert sum(dtypes.counts.values()) > 0
    assert result["attention_ops"] == dict(dtypes.attention)


@pytest.mark.cpu
@pytest.mark.nightly  # every push compares a whole watched run with an unwatched one (tests/test_reach.py)
def test_a_watched_profile_step_has_the_same_peak_and_sees_the_models_library(steady_engine: Any) -> None:
    """What ``perfsuite ab`` asks of the packages that differ (perfsuite.worker.reach) is watched in the
    profile's step: three steps in the steady state, plain, watched, plain again, have the same peak,
    split and other live tensors to the byte; the watched one saw transformers' code run."""
    from perfsuite.core.reach import Ask
    from perfsuite.worker.reach import Watch

    watch = Watch(Ask(("transformers",)))
    plain, watched, plain_again = _profiled(steady_engine, {}, {"watch": watch}, {})
    assert "error" not in plain
    assert plain == plain_again, "not a steady state: the comparison says nothing"
    assert watched == plain
    assert watch.complete
    assert watch.ran()["packages"][0]["python_calls"] > 0


def test_memtrackers_advice_for_a_module_run_twice_is_said_in_the_steps_terms() -> None:
    """A step that calls the model's modules itself, once per micro-batch, never runs the model's forward
    (before which perfsuite clears MemTracker's per-module figures): torch's advice, reset_mod_stats, is
    perfsuite's to follow, so the record says what the step can do instead (measured: a team's step that
    called before_micro_batch() as told got its peak)."""
    from perfsuite.worker.measure import _followed

    said = _followed(NotImplementedError("MemTracker does not support memory tracking for multiple iterative calls."))
    assert said.startswith("a module of the model ran again in one step with no forward of the model itself")
    assert "call before_micro_batch() before each micro-batch" in said
    assert "reset_mod_stats" not in said
    assert _followed(RuntimeError("other")) == "RuntimeError: other"
