"""An explanation run's instruments inside a worker (perfsuite.worker.step_profile, inventory), on a
tiny model in this process: the profiler's stacks with Python frames, the Chrome trace kept, every
tensor by name, and per step the gradients before clipping, the data's digest, the learning rate."""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from perfsuite.core.explain import profile, profile_lines
from perfsuite.worker.device import get_device
from perfsuite.worker.frame_names import qualifier
from perfsuite.worker.inventory import StepRecorder, gradients_before_step, inventory
from perfsuite.worker.step_profile import host_events, host_stacks, profile_steps

HELD = [torch.zeros(1 << 17)]
"""A module-level cache outside any model (512 KiB): the inventory names where it is held."""


def slow_hook(module: torch.nn.Module, args: Any, output: Any) -> Any:
    time.sleep(0.002)
    return output


def remix(y: torch.Tensor) -> torch.Tensor:
    return y @ torch.eye(y.shape[-1])  # the same values, an op more forward and one more backward


def hooks() -> list[Any]:
    """A closure and a lambda, made only when it is called (as a step makes its hooks): never called here."""

    def hook() -> int:
        return 1

    return [hook, lambda: 2]


class Tiny:
    """A step of a two-layer model with Adam, clipped to ``clip``; ``extra`` more matmuls after it;
    with ``remix``, the output multiplied by an identity matrix."""

    def __init__(
        self, *, hook: bool = False, extra: int = 0, clip: float = 1e9, fixed: bool = False, remix: bool = False
    ) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
        self.model.register_buffer("scale", torch.ones(4))
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=0.01)
        self.extra, self.clip, self.batch, self.fixed, self.remix = extra, clip, 0, fixed, remix
        if hook:
            self.model[0].register_forward_hook(slow_hook)

    def in_training_thread(self, fn: Any) -> Any:
        return fn()  # as perfsuite's loop engine: the caller's thread steps

    def step(self, before_micro_batch: Any = None, within: Any = None) -> Any:
        self.batch += 0 if self.fixed else 1
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(self.batch))
        with within if within is not None else contextlib.nullcontext():  # MemTracker, where it is asked
            out = self.model(x)
            loss = (remix(out) if self.remix else out).pow(2).mean()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        for _ in range(self.extra):
            torch.mm(torch.ones(8, 8), torch.ones(8, 8))
        return loss.detach()


def _driven(tiny: Tiny) -> Any:
    from perfsuite.worker.engines.driven import Driven

    return Driven(tiny, device_type="cpu")  # type: ignore[arg-type]


def test_the_profile_has_ops_and_python_frames_per_step_and_keeps_a_trace(tmp_path: Path) -> None:
    trace = tmp_path / "side.pt.trace.json.gz"
    found = profile_steps(_driven(Tiny(hook=True, extra=2)), get_device("cpu"), 2, str(trace))
    tables = profile.tables(found)
    assert tables["op"]["aten::mm"].calls == 3 + 2  # three in the backward, and the two extra ones
    hook = next(k for k in tables["python"] if k.endswith("slow_hook → <built-in function sleep>"))
    assert tables["python"][hook].calls == 1
    assert tables["python"][hook].us > 1500  # 2 ms asked; at least most of it
    own = next(k for k in tables["python"] if k.endswith("slow_hook"))
    assert tables["python"][own].us < 1000  # the hook's own time, without the sleep it calls
    assert "test_explain_worker" in tables["package"]
    assert not any("0x" in f for f in found.frames)  # no object addresses: two processes' names join
    assert found.trace == str(trace)
    with gzip.open(trace, "rt") as f:
        events = json.load(f)["traceEvents"]
    assert any(e.get("name", "").startswith("ProfilerStep#") for e in events)  # what Perfetto and HTA look for
    assert any(e.get("cat") == "python_function" for e in events)


def test_two_profiles_of_one_step_and_an_extra_call() -> None:
    cpu = get_device("cpu")
    a = [profile_steps(_driven(Tiny()), cpu, 2) for _ in range(2)]
    b = [profile_steps(_driven(Tiny(extra=1)), cpu, 2) for _ in range(2)]
    counted = [c for c in profile.diff(a, b).changes if c.counted and c.level == "op"]
    assert ("aten::mm", 3.0, 4.0) in [(c.key, c.calls_a, c.calls_b) for c in counted]  # 3: the backward's
    (mm,) = [c for c in counted if c.key == "aten::mm"]
    (asked,) = mm.sources  # the backward's three on both sides: not a source of the change
    line = Tiny.step.__code__.co_firstlineno
    # Named by its qualified name, read from its file: a class's step told apart from another's.
    assert (asked.frame, asked.calls_a, asked.calls_b) == (f"test_explain_worker.py({line}): Tiny.step", 0, 1)
    said = profile_lines.describe(mm)
    assert said.endswith(f": +1 from test_explain_worker.py:Tiny.step (defined at line {line})")


@pytest.mark.alone  # a time change is named only beyond the profiles' own noise: nothing beside them
def test_a_backwards_ops_are_asked_for_by_the_forward_frame_that_made_them() -> None:
    cpu = get_device("cpu")
    a = [profile_steps(_driven(Tiny()), cpu, 2) for _ in range(2)]
    b = [profile_steps(_driven(Tiny(remix=True)), cpu, 2) for _ in range(2)]
    (mm,) = [c for c in profile.diff(a, b).level("op") if c.key == "aten::mm"]
    name = f"test_explain_worker.py({remix.__code__.co_firstlineno}): remix"
    assert [(s.frame, s.calls_a, s.calls_b, s.backward) for s in mm.sources] == [
        (name, 0, 1, False),
        (name, 0, 1, True),
    ]
    said = profile_lines.describe(mm)  # what the two calls cost, at this machine's time per call
    assert said.startswith("aten::mm 3 → 5 calls/step")
    assert said.endswith(
        f": +1 from test_explain_worker.py:remix (defined at line {remix.__code__.co_firstlineno}) "
        "and +1 from its backward"
    )


class Remix(torch.nn.Module):
    def forward(self, y: torch.Tensor) -> torch.Tensor:
        return remix(y)


def test_each_modules_forward_says_what_activations_it_kept() -> None:
    """MemTracker following every module: the module added to the model is named as what keeps more."""
    from perfsuite.core.explain import modules as by_module
    from perfsuite.worker.measure import memory_breakdown

    def kept(tiny: Tiny) -> dict[str, int]:
        found = memory_breakdown(_driven(tiny), module_peaks=True)
        assert "error" not in found
        return dict(found["forward_activations"])

    plain, remixed = Tiny(), Tiny()
    remixed.model.add_module("remix", Remix())
    a, b = kept(plain), kept(remixed)
    assert a["Sequential"] > 0
    assert b["Sequential.remix"] > 0
    assert "Sequential.remix" not in a
    assert by_module.changes(a, b)[0].module == "Sequential.remix"


def test_a_backwards_op_is_matched_to_the_op_that_made_its_node_not_one_that_read_its_number() -> None:
    """Every op run with gradients on reads the next sequence number: a mask's ``aten::ones`` in the
    model's frame reads the number the layer's ``aten::mm`` then takes for its node."""
    from torch.profiler import DeviceType

    from perfsuite.worker.step_profile import HostEvent, _nest

    def event(name: str, start: float, end: float, sequence: int = -1, fwd_thread: int = 0) -> HostEvent:
        return HostEvent(name, 1, start, end, DeviceType.CPU, False, sequence, fwd_thread)

    events = [
        event("ProfilerStep#1", 0, 100),
        event("acme/model.py(10): forward", 1, 50),
        event("aten::ones", 2, 3, sequence=5),
        event("acme/layer.py(20): forward", 4, 20),
        event("aten::mm", 5, 10, sequence=5),
        event("torch/autograd/graph.py(966): _engine_run_backward", 60, 90),
        event("autograd::engine::evaluate_function: MmBackward0", 61, 80, sequence=5, fwd_thread=1),
        event("aten::mm", 62, 70),
    ]
    _nest(events)
    frames, rows = host_stacks(events)
    (backward,) = [r for r in rows if r.origin and frames[r.path[-1]] == "aten::mm"]
    assert [frames[i] for i in backward.origin] == [
        "acme/model.py(10): forward",
        "acme/layer.py(20): forward",
        "aten::mm",
    ]


def test_the_inventory_names_every_tensor_after_a_step() -> None:
    tiny = Tiny()
    tiny.step()
    with gradients_before_step(tiny.model) as grads:
        tiny.step()
    found = {(t.kind, t.name): t for t in inventory(tiny.model, tiny.optimizer, grads)}
    assert found[("parameter", "0.weight")].shape == (32, 16)
    assert found[("gradient", "0.weight")].nbytes == 32 * 16 * 4  # read before the step, when they all exist
    assert found[("buffer", "scale")].dtype == "float32"
    assert found[("optimizer_state", "2.bias:exp_avg_sq")].shape == (1,)
    held = [t for t in found.values() if t.kind == "other" and t.name.endswith("test_explain_worker.HELD[0]")]
    assert [t.nbytes for t in held] == [HELD[0].numel() * 4]
    # A tensor a module keeps in a plain attribute (``self.last = ...``), and one an engine keeps
    tiny.model[2].last_probs = torch.zeros(128, 256)
    tiny.model.seen = {"inputs": torch.zeros(1 << 15)}  # type: ignore[assignment]
    engine = type("Engine", (), {})()
    engine.cache = torch.zeros(1 << 16)
    others = {t.name: t for t in inventory(tiny.model, tiny.optimizer, grads, {"engine": engine}) if t.kind == "other"}
    assert others["model.2.last_probs"].shape == (128, 256)
    assert others["model.seen['inputs']"].nbytes == 1 << 17
    assert others["engine.cache"].nbytes == 1 << 18


def test_each_step_records_its_data_its_learning_rate_and_its_gradients_before_clipping() -> None:
    tiny = Tiny(clip=1e-6)  # clipping scales every gradient down: the recorded norms are before it
    recorder = StepRecorder(tiny.model, tiny.optimizer)
    steps = []
    for index in range(3):
        recorder.begin(grads=index < 2)
        steps.append(recorder.end(tiny.step()))
    recorder.close()
    assert steps[0].data != steps[1].data  # another batch each step
    assert steps[0].lr == (0.01,)
    assert steps[2].grads is None
    assert steps[0].grads is not None
    assert set(steps[0].grads) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    assert min(steps[0].grads.values()) > 1e-3  # not the clipped 1e-6
    again = Tiny(clip=1e-6)
    recorder = StepRecorder(again.model, again.optimizer)
    recorder.begin(grads=True)
    assert recorder.end(again.step()) == steps[0]  # the same first step, to the bit
    recorder.close()
    fixed = Tiny(fixed=True)
    recorder = StepRecorder(fixed.model, fixed.optimizer)
    digests = []
    for _ in range(2):
        recorder.begin(grads=False)
        digests.append(recorder.end(fixed.step()).data)
    assert digests[0] == digests[1]  # the same batch twice: each step's digest is its own


def test_a_cpu_has_no_allocator_history() -> None:
    with get_device("cpu").allocation_history() as history:
        pass
    assert history == {}


@pytest.mark.nightly
def test_an_explanation_run_of_a_real_case() -> None:
    """The worker's target on tiny-bert, in this process: its steps reproduce a timed run's losses."""
    from perfsuite.core.explain.records import ExplainRecord
    from perfsuite.core.spec import CaseSpec
    from perfsuite.worker.explain import explain_case
    from perfsuite.worker.run import run_case

    spec = CaseSpec(model="tiny-bert", strategy="vanilla", steps=3, warmup_steps=2, threads=1, profile=False)
    record = explain_case(spec, {"profile_steps": 2, "grads_until": 3, "inventory": True})
    found = ExplainRecord.from_json(record["explain"])
    timed = run_case(spec)
    assert [s.loss for s in found.steps] == timed["loss"][:4]
    assert found.initial_weights == timed["initial_weights"]
    assert all(s.grads for s in found.steps)
    assert found.profile is not None
    assert found.profile.steps == 2
    assert {t.kind for t in found.tensors} >= {"parameter", "gradient", "optimizer_state"}
    kept = found.forward_activations  # each module's forward, followed by MemTracker
    assert kept["BertForSequenceClassification"] == max(kept.values())  # the model's forward keeps all of it
    assert kept["BertForSequenceClassification.bert.encoder.layer.0.attention.self"] > 0


class Threaded(Tiny):
    """Each step in a thread of its own while the caller waits, as the Trainer engine steps."""

    def step(self, before_micro_batch: Any = None, within: Any = None) -> Any:
        import threading

        done: list[Any] = []
        worker = threading.Thread(target=lambda: done.append(Tiny.step(self)))
        worker.start()
        worker.join()
        return done[0]

    def in_training_thread(self, fn: Any) -> Any:
        import threading

        done: list[Any] = []
        worker = threading.Thread(target=lambda: done.append(fn()))
        worker.start()
        worker.join()
        return done[0]


def test_an_engine_stepping_in_its_own_thread_is_profiled_there_without_the_caller_s_wait() -> None:
    found = profile_steps(_driven(Threaded()), get_device("cpu"), 2)
    tables = profile.tables(found)
    assert tables["op"]["aten::mm"].calls == 3  # the step's work, in its thread
    assert not [k for k in tables["python"] if "join" in k or "acquire" in k]  # not the caller's wait


@pytest.mark.deepspeed
@pytest.mark.parametrize("engine", ["loop", pytest.param("trainer", marks=pytest.mark.nightly)])
def test_under_zero_the_recorded_gradient_is_the_whole_accumulated_one(engine: str) -> None:
    """DeepSpeed's ZeRO-2 takes each micro-batch's gradient into its own partitions, so a parameter's
    ``.grad`` after a micro-batch is that micro-batch's alone: the recorder reads the whole gradient
    the update uses, the same as the engine accumulates without DeepSpeed (the Trainer, which makes
    its optimizer only once it trains, included)."""
    from perfsuite.core.explain.records import ExplainRecord
    from perfsuite.core.spec import CaseSpec
    from perfsuite.worker.explain import explain_case
    from perfsuite.worker.process import run_in_worker

    norms = {}
    for strategy in ("grad_accum", "zero2+grad_accum"):
        spec = CaseSpec(
            model="tiny-bert", strategy=strategy, engine=engine, steps=2, warmup_steps=1, threads=1, profile=False
        )
        record = run_in_worker(spec, timeout_s=300, target=functools.partial(explain_case, ask={"grads_until": 0}))
        assert record["status"] == "ok", record.get("error")
        first = ExplainRecord.from_json(record["explain"]).steps[0]
        grads = first.grads
        assert grads is not None
        if strategy.startswith("zero"):  # its last micro-batch's apart, smaller than the whole step's
            assert first.last_micro is not None
            assert set(first.last_micro) == set(grads)
            same = [name for name in grads if first.last_micro[name] == pytest.approx(grads[name], rel=1e-3, abs=0)]
            assert not same, {name: (first.last_micro[name], grads[name]) for name in same}
        else:
            assert first.last_micro is None
        norms[strategy] = {name.removeprefix("module."): norm for name, norm in grads.items()}  # DeepSpeed's engine
    plain, zero = norms["grad_accum"], norms["zero2+grad_accum"]
    assert set(zero) == set(plain)
    assert all(zero[name] == pytest.approx(plain[name], rel=1e-4, abs=1e-9) for name in plain)


@pytest.mark.parametrize("engine", [Tiny, Threaded])
def test_the_profile_s_events_read_fast_make_the_stacks_torch_s_own_events_make(engine: type[Tiny]) -> None:
    """perfsuite reads the profile's raw events and nests them as torch's ``prof.events()`` does, a
    quarter of its cost: the same stacks, self times and calls, from the same profile."""
    from torch.profiler import profile, schedule

    from perfsuite.worker.step_profile import _all_threads

    driven = _driven(engine(hook=True, extra=2, remix=True))
    elsewhere = engine is Threaded
    with profile(
        with_stack=True,
        schedule=schedule(wait=0, warmup=1, active=2, repeat=1),
        experimental_config=_all_threads() if elsewhere else None,
    ) as prof:
        for _ in range(3):
            driven.step()
            prof.step()

    def named(frames: tuple[str, ...], rows: Any) -> dict[tuple[tuple[str, ...], ...], tuple[float, int]]:
        return {
            (tuple(frames[i] for i in row.path), tuple(frames[i] for i in row.origin)): (row.self_us, row.calls)
            for row in rows
        }

    torch_s = named(*host_stacks(prof.events(), skip_marking_thread=elsewhere))
    ours = named(*host_stacks(host_events(prof), skip_marking_thread=elsewhere))
    assert len(torch_s) > 20
    assert any(origin for _, origin in torch_s)  # a backward's ops, with the forward op that made them
    assert ours == torch_s


def test_a_frame_is_named_by_its_functions_qualified_name() -> None:
    named = qualifier()
    here = Path(__file__).name
    step, remixed = Tiny.step.__code__.co_firstlineno, remix.__code__.co_firstlineno
    assert named(f"{here}({step}): step") == f"{here}({step}): Tiny.step"
    assert named(f"{__file__}({step}): step") == f"{__file__}({step}): Tiny.step"  # a path as absolute
    assert named(f"{here}({remixed}): remix") == f"{here}({remixed}): remix"  # a module's function
    assert named(f"{here}({step}): <lambda>") == f"{here}({step}): <lambda>"  # no function of that name there
    assert named(f"other/{here}({step}): step") == f"other/{here}({step}): step"  # another file of that name
    assert named("aten::mm") == "aten::mm"

    def inner() -> None: ...

    def walk() -> Any:  # a generator: the profiler names each resume by the line it resumes at
        yield 1
        yield 2

    start = walk.__code__.co_firstlineno
    qualified = qualifier()
    said = "test_a_frame_is_named_by_its_functions_qualified_name.walk"
    assert [qualified(f"{here}({start + n}): walk") for n in (0, 1, 2)] == [f"{here}({start}): {said}"] * 3
    assert qualified(f"{here}({start + 1}): inner") == f"{here}({start + 1}): inner"  # not a generator's resume

    line = inner.__code__.co_firstlineno
    assert qualifier()(f"{here}({line}): inner") == (
        f"{here}({line}): test_a_frame_is_named_by_its_functions_qualified_name.inner"
    )


def test_a_closure_or_lambda_no_live_function_holds_is_named_by_the_function_it_is_made_in() -> None:
    made = {c.co_name: c.co_firstlineno for c in hooks.__code__.co_consts if isinstance(c, type(hooks.__code__))}
    here = Path(__file__).name
    named = qualifier()
    assert named(f"{here}({made['hook']}): hook") == f"{here}({made['hook']}): hooks.hook"
    assert named(f"{here}({made['<lambda>']}): <lambda>") == f"{here}({made['<lambda>']}): hooks.<lambda>"
