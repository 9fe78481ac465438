"""The pure core of explanations, their profiles (perfsuite.core.explain): frame names, the profile
diff and its noise bar, the flame graph's boxes, a GPU trace's activities and allocation sites."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from step_profiles import HOOK, LINEAR, SLEEP, STEP
from step_profiles import profile_from as _profile
from step_profiles import step as _step

from perfsuite.core.explain import flame, profile, profile_lines, traces
from perfsuite.core.explain.frames import caller, frame_name, package, short
from perfsuite.core.explain.records import StackRow, StepProfile

# Frame names


@pytest.mark.parametrize(
    ("raw", "name"),
    [
        ("<built-in method add_ of Tensor object at 0x7fc2beebfc50>", "<built-in method add_ of Tensor>"),
        (
            "<built-in method _record_function_enter_new of pybind11_builtins.pybind11_detail_function_record_v1_"
            "system_libstdcpp_gxx_abi_1xxx_use_cxx11_abi_1 object at 0x7fc2c346a770>",
            "<built-in method _record_function_enter_new>",
        ),
        ("/venv-b/lib/python3.11/site-packages/transformers/a.py(12): f", "transformers/a.py(12): f"),
        ("/repo/acme/model.py(3): g", "acme/model.py(3): g"),
        ("/elsewhere/script.py(3): g", "script.py(3): g"),
        ("torch/nn/modules/module.py(1782): _call_impl", "torch/nn/modules/module.py(1782): _call_impl"),
        ("aten::addmm", "aten::addmm"),
    ],
)
def test_a_frame_is_named_the_same_in_two_environments(raw: str, name: str) -> None:
    assert frame_name(raw, cwd="/repo") == name


def test_a_file_outside_sys_path_is_named_from_its_outermost_package(tmp_path: Path) -> None:
    """An editable install's or a checkout's file: named as an import finds it, wherever it lies."""
    (tmp_path / "src" / "acme" / "sub").mkdir(parents=True)
    (tmp_path / "scripts").mkdir()
    for init in ("src/acme/__init__.py", "src/acme/sub/__init__.py"):
        (tmp_path / init).write_text("")
    assert frame_name(f"{tmp_path}/src/acme/sub/model.py(3): g", cwd=str(tmp_path)) == "acme/sub/model.py(3): g"
    assert frame_name(f"{tmp_path}/scripts/train.py(1): main", cwd=str(tmp_path)) == "scripts/train.py(1): main"


def test_a_frame_belongs_to_its_package() -> None:
    assert package("transformers/models/bert/modeling_bert.py(1): forward") == "transformers"
    assert package("logging/__init__.py(1720): getEffectiveLevel") == "python"
    assert package("<frozen os>(674): __getitem__") == "python"
    assert package("nn.Module: Linear_0") == "torch"
    assert package(SLEEP) is None
    assert package("aten::mm") is None
    assert short(HOOK) == "acme/hooks.py:slow_hook"
    assert short(SLEEP) == "sleep"
    assert short("<built-in method softmax of Tensor>") == "Tensor.softmax"
    assert short("<built-in method eye of type>") == "eye"  # torch.eye: a method of torch's functions' type
    assert short("<built-in method _record_function_enter_new>") == "_record_function_enter_new"


# The profile diff


def test_tables_sum_each_frame_per_step_and_give_a_builtin_to_its_caller() -> None:
    tables = profile.tables(_profile({(STEP, HOOK, SLEEP): (8000.0, 2), (STEP, "aten::mm"): (600.0, 6)}, steps=2))
    assert tables["op"]["aten::mm"] == profile.Row(3.0, 300.0)
    assert tables["python"][f"{HOOK} → {SLEEP}"] == profile.Row(1.0, 4000.0)
    assert tables["package"]["acme"].us == 4000.0  # the sleep is acme's time
    assert profile.step_us(_profile({(STEP,): (100.0, 1), (STEP, "aten::mm"): (300.0, 1)}, steps=2)) == 200.0


def test_an_extra_call_is_evidence_whatever_its_time() -> None:
    a = [_step(jitter=0.2), _step(jitter=0.3)]
    b = [_step(mm_calls=3, mm_us=500.0, jitter=0.4), _step(mm_calls=3, jitter=0.5)]
    diff = profile.diff(a, b)
    (mm,) = diff.level("op")
    assert (mm.key, mm.calls_a, mm.calls_b, mm.counted, mm.status) == ("aten::mm", 2, 3, True, "changed")
    assert profile_lines.describe(mm).startswith("aten::mm 2 → 3 calls/step")


def test_a_time_change_is_shown_only_beyond_the_profiles_own_noise() -> None:
    a = [_step(jitter=0.1, seed=1), _step(jitter=0.1, seed=2)]
    slow = profile.diff(a, [_step(mm_us=5000.0, jitter=0.1, seed=3), _step(mm_us=5000.0, jitter=0.1, seed=4)])
    (mm,) = slow.level("op")
    assert mm.timed
    assert not mm.counted
    assert mm.delta_us == pytest.approx(4500, rel=0.2)
    assert "+4.50 ms/step" in profile_lines.describe(mm) or "ms/step" in profile_lines.describe(mm)
    bar = slow.thresholds["op"]
    assert profile.MIN_THRESHOLD_US <= bar < 4000
    # A change below the bar is not shown.
    small = profile.diff(a, [_step(mm_us=520.0, jitter=0.1, seed=3), _step(mm_us=520.0, jitter=0.1, seed=4)])
    assert 20 < small.thresholds["op"]
    assert not small.level("op")


def test_an_a_a_of_the_explanation_rarely_shows_anything() -> None:
    """Four profiles of one stack, each entry ±5% at random: no count changes, and a time beyond the bar
    in about one A/A in twenty (a factor of 1 would show one in three)."""
    shown = 0
    for seed in range(200):
        profiles = [_step(sleep_us=4000.0, jitter=0.1, seed=seed * 4 + i) for i in range(4)]
        diff = profile.diff(profiles[0::2], profiles[1::2])
        assert not [c for c in diff.changes if c.counted]
        shown += bool(diff.changes)
    assert shown <= 14  # 10 of 200 at the factor of 3; 23 at 2, 77 at 1


def test_new_and_vanished_functions_are_named() -> None:
    a = [_step(jitter=0.1, seed=1), _step(jitter=0.1, seed=2)]
    b = [_step(sleep_us=4000.0, jitter=0.1, seed=3), _step(sleep_us=4000.0, jitter=0.1, seed=4)]
    python = profile.diff(a, b).level("python")
    assert python[0].key == f"{HOOK} → {SLEEP}"
    assert python[0].status == "new"
    assert re.fullmatch(
        r"new: acme/hooks.py:slow_hook \(defined at line 3\) → sleep 0 → 1 calls/step, \+[34]\.\d\d ms/step",
        profile_lines.describe(python[0]),
    )
    assert profile.diff(b, a).level("python")[0].status == "vanished"
    assert profile.diff(a, b).level("package")[0].key == "acme"


BERT = "transformers/models/bert/modeling_bert.py(300): forward"
ADAMW = "torch/optim/adamw.py(500): _multi_tensor_adamw"
ENGINE = "torch/autograd/graph.py(966): _engine_run_backward"
CHECKPOINT = "torch/utils/checkpoint.py(320): unpack_hook"


@pytest.mark.parametrize(
    ("path", "asked_by"),
    [
        ((STEP, BERT, LINEAR, "aten::linear", "aten::addmm"), BERT),  # torch's frames are the way, not the ask
        ((STEP, HOOK, "contextlib.py(141): __exit__", "aten::mm"), HOOK),  # so is the standard library
        ((STEP, ADAMW, "aten::_foreach_mul_"), ADAMW),  # no frame outside torch: its innermost
        (("aten::mm",), None),
        ((STEP, HOOK, "torch/_tensor.py(566): backward", ENGINE, "aten::mm"), ENGINE),  # the backward's
        ((STEP, ENGINE, CHECKPOINT, BERT, LINEAR, "aten::addmm"), BERT),  # a checkpoint's recomputed forward
    ],
)
def test_an_op_is_asked_for_by_the_innermost_frame_of_the_code_the_case_runs(
    path: tuple[str, ...], asked_by: str | None
) -> None:
    assert caller(path) == asked_by


def test_an_ops_changed_calls_are_named_with_the_frames_that_asked_for_them() -> None:
    a = [_profile({(STEP, BERT, "aten::mm"): (400.0, 2), (STEP, ADAMW, "aten::mm"): (100.0, 1)}) for _ in "ab"]
    extra: dict[tuple[str, ...], tuple[float, int]] = {
        (STEP, BERT, "aten::mm"): (600.0, 3),
        (STEP, HOOK, "aten::mm"): (100.0, 2),
    }
    b = [_profile({(STEP, ADAMW, "aten::mm"): (100.0, 1), **extra}) for _ in "ab"]
    (mm,) = profile.diff(a, b).level("op")
    assert [(s.frame, s.calls_a, s.calls_b) for s in mm.sources] == [(HOOK, 0, 2), (BERT, 2, 3)]  # adamw's did not move
    assert profile_lines.describe(mm) == (
        "aten::mm 3 → 6 calls/step, +0.30 ms/step: +2 from acme/hooks.py:slow_hook (defined at line 3), "
        "+1 from transformers/models/bert/modeling_bert.py:forward (defined at line 300)"
    )
    assert profile_lines.describe(profile.diff(b, a).level("op")[0]).endswith(
        ": -2 from acme/hooks.py:slow_hook (defined at line 3), "
        "-1 from transformers/models/bert/modeling_bert.py:forward (defined at line 300)"
    )
    (backward,) = profile.diff(
        [_profile({(STEP, ENGINE, "aten::mm"): (100.0, 2)}) for _ in "ab"],
        [_profile({(STEP, ENGINE, "aten::mm"): (100.0, 3)}) for _ in "ab"],
    ).level("op")
    assert profile_lines.describe(backward).endswith(": +1 from the backward pass")  # its forward not profiled


def test_an_op_inside_an_op_of_its_name_is_part_of_that_call() -> None:
    """``torch.eye`` runs ``aten::eye``, which fills its result through ``aten::eye`` again: one call asked."""
    remix = "acme/model.py(83): _remix"
    a = [_profile({(STEP, "aten::mm"): (100.0, 1)}) for _ in "ab"]
    nested = {(STEP, remix, "aten::eye"): (20.0, 1), (STEP, remix, "aten::eye", "aten::eye"): (30.0, 1)}
    b = [_profile({(STEP, "aten::mm"): (100.0, 1), **nested}) for _ in "ab"]
    assert profile.tables(b[0])["op"]["aten::eye"] == profile.Row(1.0, 50.0)  # both calls' time, one call
    (eye,) = profile.diff(a, b).level("op")
    said = profile_lines.describe(eye)
    assert said == "new: aten::eye 0 → 1 calls/step, +0.05 ms/step: +1 from acme/model.py:_remix (defined at line 83)"


def test_a_backwards_op_is_asked_for_by_the_forward_frame_that_made_its_node() -> None:
    frames = (STEP, BERT, "aten::matmul", ENGINE, "autograd::engine::evaluate_function: MmBackward0", "aten::mm")

    def side(remixed: int) -> StepProfile:
        rows = [StackRow((0, 1, 2), 10.0, remixed), StackRow((0, 3, 4, 5), 10.0, 2 + remixed, (0, 1, 2))]
        return StepProfile(1, frames, tuple(rows))

    (mm,) = [c for c in profile.diff([side(1), side(1)], [side(3), side(3)]).level("op") if c.key == "aten::mm"]
    assert [(s.frame, s.calls_b - s.calls_a, s.backward) for s in mm.sources] == [(BERT, 2, True)]
    assert profile_lines.describe(mm).endswith(
        ": +2 from the backward of transformers/models/bert/modeling_bert.py:forward (defined at line 300)"
    )
    timed_only = profile.diff(
        [_step(seed=1), _step(seed=2)], [_step(mm_us=5000.0, seed=3), _step(mm_us=5000.0, seed=4)]
    )
    assert [c.sources for c in timed_only.level("op")] == [()]  # the same calls: no frame asked for more


def test_a_backward_in_a_device_thread_without_python_frames_is_its_forwards() -> None:
    """On a GPU the autograd engine runs a backward in a thread of its own: no Python frame above its ops."""
    frames = (STEP, BERT, "aten::matmul", "autograd::engine::evaluate_function: MmBackward0", "aten::mm", "aten::add")

    def side(extra: int) -> StepProfile:
        rows = [StackRow((0, 1, 2), 10.0, 1), StackRow((3, 4), 10.0, 1 + extra, (0, 1, 2)), StackRow((5,), 1.0, extra)]
        return StepProfile(1, frames, tuple(rows))

    add, mm = sorted(
        (c for c in profile.diff([side(0)] * 2, [side(1)] * 2).level("op") if c.counted), key=lambda c: c.key
    )
    assert profile_lines.describe(mm).endswith(
        ": +1 from the backward of transformers/models/bert/modeling_bert.py:forward (defined at line 300)"
    )
    assert profile_lines.describe(add).endswith(": +1 with no Python frame")  # said, not dropped


def test_an_asker_whose_function_moved_lines_is_one_asker() -> None:
    """The candidate's file gained a line above ``forward``: its calls are one asker's, said at its new line."""

    def side(line: int, views: int) -> StepProfile:
        forward = f"acme/model.py({line}): forward"
        return _profile({(STEP, forward): (50.0, 1), (STEP, forward, "aten::view"): (10.0 * views, views)})

    (view,) = profile.diff([side(56, 74)] * 2, [side(57, 75)] * 2).level("op")
    assert [(s.frame, s.calls_a, s.calls_b) for s in view.sources] == [("acme/model.py(57): forward", 74, 75)]
    said = profile_lines.describe(view)
    assert said.endswith(": +1 from acme/model.py:forward (defined at line 56 → 57)")  # where it moved


def test_a_count_that_varies_within_one_side_is_no_evidence() -> None:
    a = [_step(mm_calls=2), _step(mm_calls=3)]
    diff = profile.diff(a, [_step(mm_calls=4), _step(mm_calls=4)])
    assert not [c for c in diff.level("op") if c.counted]
    assert diff.unstable["op"] == 1


def test_one_profile_per_side_shows_counts_only() -> None:
    diff = profile.diff([_step()], [_step(mm_calls=3, mm_us=90000.0)])
    assert diff.thresholds == {}
    (mm,) = diff.level("op")
    assert mm.counted
    assert not mm.timed


def test_a_function_that_moved_lines_is_still_the_same_function() -> None:
    moved = "acme/hooks.py(9): slow_hook"
    a = [_profile({(STEP, HOOK): (10.0, 1)}), _profile({(STEP, HOOK): (10.0, 1)})]
    b = [_profile({(STEP, moved): (10.0, 2)}), _profile({(STEP, moved): (10.0, 2)})]
    (change,) = profile.diff(a, b).level("python")
    assert change.key == "acme/hooks.py(3 → 9): slow_hook"
    assert change.status == "changed"


def test_functions_of_one_name_that_moved_lines_pair_in_their_order() -> None:
    """A decorator's ``wrapper``s in one file, all moved by a new release: each is still itself, and
    one that is called more is the only change."""
    first, second = "transformers/utils/generic.py(800): wrapper", "transformers/utils/generic.py(900): wrapper"
    moved = "transformers/utils/generic.py(820): wrapper", "transformers/utils/generic.py(925): wrapper"
    a = [_profile({(STEP, first): (10.0, 1), (STEP, second): (10.0, 4)}) for _ in range(2)]
    b = [_profile({(STEP, moved[0]): (10.0, 1), (STEP, moved[1]): (10.0, 5)}) for _ in range(2)]
    (change,) = profile.diff(a, b).level("python")
    assert (change.key, change.calls_a, change.calls_b) == ("transformers/utils/generic.py(900 → 925): wrapper", 4, 5)
    assert change.status == "changed"


def test_changes_rank_by_time_then_by_what_their_calls_cost() -> None:
    a = [_step(), _step()]
    b = [
        _profile(
            {
                **{k: v for k, v in _rows(_step()).items()},
                (STEP, "aten::mm"): (750.0, 3),
                (STEP, "aten::add_"): (55.0, 11),
            }
        )
        for _ in range(2)
    ]
    ops = profile.diff(a, b).level("op")
    assert [c.key for c in ops] == ["aten::mm", "aten::add_"]  # one 250 µs call before one 5 µs call


def _rows(p: StepProfile) -> dict[tuple[str, ...], tuple[float, int]]:
    return {tuple(p.frames[i] for i in r.path): (r.self_us, r.calls) for r in p.stacks}


# The flame graph


@pytest.mark.parametrize(
    "call", ["torch/nn/modules/module.py(1782): _call_impl", "torch/nn/modules/module.py(1782): Module._call_impl"]
)
def test_the_flame_graph_keeps_vanished_frames_and_drops_module_plumbing(call: str) -> None:
    a = [_profile({(STEP, call, LINEAR): (600.0, 1), (STEP, "aten::mm"): (400.0, 1)})]
    b = [_profile({(STEP, call, LINEAR): (600.0, 1), (STEP, HOOK): (400.0, 1)})]
    found = {box.name: box for box in flame.boxes(a, b)}
    assert call not in found
    assert found[STEP].width == pytest.approx(1.0)
    assert found[LINEAR].depth == 1
    assert (found["aten::mm"].us_a, found["aten::mm"].us_b) == (400.0, 0.0)  # vanished, still drawn
    assert found["aten::mm"].width == pytest.approx(0.2)
    # Children left to right by name: acme's hook, the op, torch's linear.
    assert [found[n].start for n in (HOOK, "aten::mm", LINEAR)] == pytest.approx([0.0, 0.2, 0.4])
    assert not found["aten::mm"].moved  # one profile a side: no bar, nothing coloured
    twice = {box.name: box for box in flame.boxes(a * 2, b * 2)}
    assert twice["aten::mm"].moved
    assert not twice[LINEAR].moved  # the same on both sides


# A GPU's trace and allocator


def test_a_gpu_trace_gives_kernels_copies_and_collectives_with_bytes() -> None:
    events = [
        {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_tn", "dur": 10.0},
        {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_tn", "dur": 12.0},
        {
            "ph": "X",
            "cat": "gpu_memcpy",
            "name": "Memcpy HtoD (Pageable -> Device)",
            "dur": 5.0,
            "args": {"bytes": 4096},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
            "dur": 30.0,
            "args": {"In msg nelems": 1000, "dtype": "Float"},
        },  # fmt: skip
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "dur": 3.0},
    ]
    rows = {(r.kind, r.name): r for r in traces.device_rows({"traceEvents": events})}
    assert rows[("kernel", "ampere_sgemm_128x64_tn")].calls == 2
    assert rows[("kernel", "ampere_sgemm_128x64_tn")].us == 22.0
    assert rows[("memcpy", "Memcpy HtoD (Pageable -> Device)")].bytes == 4096
    assert rows[("collective", "ncclDevKernel_AllReduce_Sum_f32_RING_LL")].bytes == 4000
    assert len(rows) == 3
    diff = profile.diff(
        [StepProfile(1, (), (), device=tuple(traces.device_rows({"traceEvents": events})))],
        [StepProfile(1, (), (), device=tuple(traces.device_rows({"traceEvents": events + events[2:3]})))],
    )
    (copy,) = diff.level("device")
    said = profile_lines.describe(copy)
    assert "memcpy: Memcpy HtoD (Pageable -> Device) 1 → 2 calls/step, 4.0 → 8.0 KiB/step" in said


def test_allocation_sites_are_the_first_frames_outside_torch() -> None:
    frames = [
        {"filename": "/v/site-packages/torch/nn/modules/module.py", "line": 1, "name": "_call_impl"},
        {"filename": "/v/site-packages/transformers/cache_utils.py", "line": 80, "name": "update"},
    ]
    segments = [
        {
            "blocks": [
                {"size": 1024, "state": "active_allocated", "frames": frames},
                {"size": 512, "state": "inactive", "frames": frames},
                {"size": 256, "state": "active_allocated", "frames": frames[:1]},
            ]
        },  # fmt: skip
    ]
    sites = traces.allocation_sites(segments)
    assert [(s.frame, s.bytes, s.blocks) for s in sites] == [
        ("transformers/cache_utils.py:80 update", 1024, 1),
        ("(no Python frame outside torch)", 256, 1),
    ]


def test_calls_that_changed_but_did_not_clear_the_bar_say_what_they_cost_at_their_time_per_call() -> None:
    """An op called more whose time stayed within the profiles' noise: the difference of its two times
    is noise (an op called once more can read faster), its count is exact and its time per call a mean
    over both sides' calls, so what the extra calls cost is given at that time per call."""
    mm = profile.Change("op", "aten::mm", 21, 33, 17_630.0, 16_000.0, counted=True, timed=False)
    per_call = (17_630.0 + 16_000.0) / (21 + 33)  # over both sides' calls
    assert (
        profile_lines.describe(mm)
        == f"aten::mm 21 → 33 calls/step, ≈+{12 * per_call / 1e3:.2f} ms/step by its time per call"
    )
    timed = dataclasses.replace(mm, us_b=22_430.0, timed=True)  # beyond the bar: its own time change
    assert profile_lines.describe(timed) == "aten::mm 21 → 33 calls/step, +4.80 ms/step"
    cheap = profile.Change("op", "aten::view", 74, 75, 74.0, 75.0, counted=True, timed=False)  # 1 µs a call
    assert profile_lines.describe(cheap) == "aten::view 74 → 75 calls/step"


def test_a_change_of_the_import_machinery_says_it_follows_the_sides_import_paths() -> None:
    """An overlay lengthens a side's path: each per-step import stats more directories. True, and said
    so, as a difference of the set-ups, not of the code compared."""
    key = "<frozen importlib._bootstrap_external>(1604): FileFinder.find_spec"
    found = profile.Change("python", key, 10, 12, 50.0, 60.0, counted=True, timed=False)
    said = profile_lines.describe(found)
    assert said.startswith("<frozen importlib._bootstrap_external>:FileFinder.find_spec 10 → 12 calls/step")
    assert said.endswith(profile_lines.IMPORTS)
    other = dataclasses.replace(found, key="acme/model.py(12): Model.forward")
    assert not profile_lines.describe(other).endswith(profile_lines.IMPORTS)
    # Where it is all that changed, the explanation says plainly that nothing of the code compared did.
    from perfsuite.core.explain.explanation import time_lines

    diff = profile.ProfileDiff(2, 30_000.0, 30_500.0, {"op": 50.0, "python": 20.0}, (found,))
    assert time_lines(diff)[-1].startswith(
        "time: no op or Python function of the code compared differs beyond the import machinery's (profiled step"
    )
    assert not time_lines(dataclasses.replace(diff, changes=(found, other)))[-1].startswith("time: no op")
