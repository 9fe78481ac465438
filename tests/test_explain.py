"""The pure core of explanations (perfsuite.core.explain), beyond the profiles
(tests/test_explain_profiles.py): the tensor inventory diff with its arithmetic, where loss curves
part and the gradients' ratios there, and the words that say it."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from step_profiles import step as _step

from perfsuite.core.explain import explanation, gradients, tensors
from perfsuite.core.explain import modules as by_module
from perfsuite.core.explain.records import ExplainAsk, ExplainRecord, StepFacts, TensorEntry

# Tensors


def _t(kind: str, name: str, shape: tuple[int, ...], dtype: str = "float32", size: int = 4) -> TensorEntry:
    return TensorEntry(kind, name, dtype, shape, math.prod(shape) * size)


PARAMS = [_t("parameter", "w", (1000, 1100)), _t("parameter", "b", (1000,))]


def test_a_new_buffer_is_named_with_its_size() -> None:
    b = [*PARAMS, _t("buffer", "injected_cache", (13_107_200,))]
    cause = tensors.memory_cause(
        {"buffers": 0}, {"buffers": 50 * 2**20}, PARAMS, b, moved=["buffers"], num_parameters=1_101_000
    )
    (buffers,) = cause.categories
    assert buffers.arithmetic == "+50.00 MiB = 13.1 M elements × 4 B (float32)"
    assert tensors.describe(buffers) == (
        "buffers +50.00 MiB = 13.1 M elements × 4 B (float32): "
        "new buffer injected_cache (float32 (13107200,), 50.00 MiB)"
    )


def test_a_category_whose_peak_moved_less_than_its_tensors_says_both_for_what_they_are() -> None:
    """The breakdown is taken at the step's peak; the tensors named are every live one that differs:
    where the two part, the line says which figure is which."""
    b = [*PARAMS, _t("gradient", "w.grad_copy", (364_544,))]  # 1.39 MiB more, the peak 0.19 MiB
    cause = tensors.memory_cause(
        {"gradients": 0}, {"gradients": 200_000}, PARAMS, b, moved=["gradients"], num_parameters=1_101_000
    )
    assert tensors.describe(cause.categories[0]).startswith(
        "gradients +0.19 MiB at the peak (the tensors that differ, taken together: +1.39 MiB"
    )


def test_one_fp32_copy_of_the_parameters_is_said_so() -> None:
    masters = [_t("optimizer_state", f"{p.name}:master", p.shape) for p in PARAMS]
    cause = tensors.memory_cause(
        {}, {}, PARAMS, [*PARAMS, *masters], moved=["optimizer_state"], num_parameters=1_101_000
    )
    (state,) = cause.categories
    assert state.arithmetic == "+4.20 MiB = 1.1 M parameters × 4 B: one float32 copy of the parameters"
    assert tensors.arithmetic([tensors.TensorChange("x", "x", None, _t("x", "x", (2_202_000,)))], 1_101_000).startswith(
        "+8.40 MiB = 2 × 1.1 M parameters × 4 B: 2 float32 copies"
    )


def test_a_dtype_change_and_unnamed_tensors_matched_by_shape() -> None:
    a = [_t("parameter", "w", (10, 10)), _t("other", "", (64,)), _t("other", "", (64,))]
    b = [_t("parameter", "w", (10, 10), "bfloat16", 2), *[_t("other", "", (64,))] * 3, _t("other", "", (8,))]
    (w,) = tensors.changes(a, b, "parameter")
    assert tensors.describe_change(w) == "parameter w: float32 (10, 10) → bfloat16 (10, 10) (-200 B)"
    assert [c.name for c in tensors.changes(a, b, "other")] == ["(unnamed float32 64) #3", "(unnamed float32 8)"]


def test_activations_are_not_in_the_inventory_and_said_so() -> None:
    cause = tensors.memory_cause(
        {"activations": 10}, {"activations": 2**20}, [], [], moved=["activations"], num_parameters=1
    )
    assert "not in the inventory" in tensors.describe(cause.categories[0])
    peak = tensors.memory_cause(
        {"temporaries": 2**20}, {"temporaries": 0}, [], [], moved=["temporaries"], num_parameters=1
    )
    assert tensors.describe(peak.categories[0]).startswith(
        "temporaries -1.00 MiB at the peak: what an op makes and frees within itself, counted at the moment of the peak"
    )  # a peak that moved to another moment moves them too


MiB = 2**20
KEPT_A = {
    "LM": 20 * MiB,  # its forward keeps its submodules' 18 MiB and 2 MiB of its own code's
    "LM.embed": 2 * MiB,
    "LM.blocks.0": 8 * MiB,  # a ModuleList's layers: the list itself is never called, never followed
    "LM.blocks.0.attn": 4 * MiB,
    "LM.blocks.1": 8 * MiB,
    "LM.blocks.1.attn": 4 * MiB,
}


def test_a_modules_own_share_is_what_its_forward_kept_less_its_followed_submodules() -> None:
    assert by_module.own_shares(KEPT_A) == {
        "LM": 2 * MiB,
        "LM.embed": 2 * MiB,
        "LM.blocks.0": 4 * MiB,
        "LM.blocks.0.attn": 4 * MiB,
        "LM.blocks.1": 4 * MiB,
        "LM.blocks.1.attn": 4 * MiB,
    }


def test_activations_are_said_by_the_modules_whose_forwards_kept_them() -> None:
    """Each layer's attention keeping its probabilities (+1 MiB each), and the model's own forward one
    projection more (+3 MiB): named by module, the layers' under one pattern, children not twice."""
    kept_b = {**KEPT_A, "LM": 25 * MiB, "LM.blocks.0": 9 * MiB, "LM.blocks.1": 9 * MiB}
    kept_b |= {"LM.blocks.0.attn": 5 * MiB, "LM.blocks.1.attn": 5 * MiB}
    shares = by_module.changes(KEPT_A, kept_b)
    assert [(s.module, s.delta, s.modules) for s in shares] == [("LM", 3 * MiB, 1), ("LM.blocks.*.attn", 2 * MiB, 2)]
    cause = tensors.memory_cause(
        {"activations": 20 * MiB},
        {"activations": 25 * MiB},
        [],
        [],
        moved=["activations"],
        num_parameters=1,
        kept_a=KEPT_A,
        kept_b=kept_b,
    )
    assert tensors.describe(cause.categories[0]) == (
        "activations +5.00 MiB: kept by the forward of LM +3.00 MiB (2.00 → 5.00 MiB, its own code); "
        "LM.blocks.*.attn +2.00 MiB (8.00 → 10.00 MiB, 2 modules' own code)"
    )
    small = {**kept_b, "LM.embed": 2 * MiB + 1024, "LM": 25 * MiB + 1024}  # embed +1 KiB: under 5% of 3 MiB
    assert [s.module for s in by_module.changes(KEPT_A, small)] == ["LM", "LM.blocks.*.attn"]
    assert by_module.changes(KEPT_A, KEPT_A) == ()


def test_one_repeated_module_that_moved_alone_keeps_its_name_and_a_small_move_its_kib() -> None:
    mixed = {"Net": 3 * MiB, "Net.0": MiB, "Net.1": MiB, "Net.2": MiB}  # a Sequential: Linear, ReLU, Linear
    (share,) = by_module.changes(mixed, {**mixed, "Net": 3 * MiB + 2048, "Net.0": MiB + 2048})
    assert (share.module, share.modules) == ("Net.0", 1)
    assert by_module.describe((share,)) == "kept by the forward of Net.0 +2.0 KiB (1,024.0 → 1,026.0 KiB, its own code)"


def test_a_tensor_made_in_the_step_and_kept_after_it_is_one_cause_not_two() -> None:
    """``self.last_probs = logits.softmax(-1)``: at the peak its bytes are activations (made in the
    step), after the step the inventory lists it under other, and other did not move at the peak."""
    kept = _t("other", "model.last_probs", (16, 64, 512))
    mib = 2**20

    def cause(a: tuple[int, int], b: tuple[int, int], side: str = "B") -> tensors.MemoryCause:
        """Activations and other at the peak on each side; ``kept`` alive after side ``side``'s step."""
        return tensors.memory_cause(
            dict(zip(("activations", "other"), a, strict=True)),
            dict(zip(("activations", "other"), b, strict=True)),
            [kept] if side == "A" else [],
            [kept] if side == "B" else [],
            moved=["activations", "other"],
            num_parameters=10,
        )

    lines = {c.category: tensors.describe(c) for c in cause((8 * mib, 1024), (10 * mib, 1024)).categories}
    assert lines["activations"] == (
        "activations +2.00 MiB: made within the step and kept after it, where other lists it: model.last_probs"
    )
    assert lines["other"] == (
        "other +0.00 MiB at the peak; its tensors that differ (+2.00 MiB = 0.524 M elements × 4 B (float32)) were "
        "made within the step, counted there under activations, and kept after it: new other model.last_probs "
        "(float32 (16, 64, 512), 2.00 MiB)"
    )
    # A new tensor that did move other at the peak (the last step's copy, held from before the step) is
    # other's; one no longer kept (side A's) is not said to be made and kept: each line stays its own.
    for alone in (cause((8 * mib, 0), (10 * mib, 2 * mib)), cause((10 * mib, 1024), (8 * mib, 1024), side="A")):
        assert [c.kept or c.counted_under for c in alone.categories] == ["", ""]
    # Where the activations moved by as much again, they say that a kept tensor's two copies may both be there.
    twice = {c.category: c for c in cause((8 * mib, 0), (10 * mib + 4096, 2 * mib)).categories}
    assert twice["activations"].twice == ("model.last_probs",)
    assert tensors.describe(twice["activations"]).endswith(
        "; as much again as other's new model.last_probs, which the step makes and keeps: at the peak the last "
        "step's copy (under other) and this step's (here) can both be alive"
    )
    assert not {c.category: c for c in cause((8 * mib, 0), (9 * mib, 2 * mib)).categories}["activations"].twice


# Loss and gradients


def _run(
    grads: list[dict[str, float]],
    *,
    weights: str = "w",
    data: str = "d",
    lr: float = 1e-3,
    losses: tuple[float, ...] = (),
) -> ExplainRecord:
    losses = losses or (2.0, 1.9)
    return ExplainRecord(
        weights, 3, steps=tuple(StepFacts(x, data, (lr,), g) for x, g in zip(losses, grads, strict=False))
    )


GRADS = {"embed.weight": 0.5, "layer.0.weight": 0.2, "layer.1.weight": 0.3, "head.weight": 0.1, "key.bias": 1e-12}


def _cause(grads_b: dict[str, float], **kw: object) -> gradients.LossCause:
    return gradients.loss_cause(
        [2.0, 1.9],
        [2.02, 1.95],
        _run([GRADS]),
        _run([grads_b], losses=(2.02, 1.95), **kw),  # type: ignore[arg-type]
        rtol=1e-3,
        atol=1e-4,
    )


def test_a_loss_scaled_is_one_ratio_shared_by_every_gradient() -> None:
    cause = _cause({k: v * 1.01 if k != "key.bias" else 3e-12 for k, v in GRADS.items()})
    assert (cause.step, cause.grad_step, cause.shape) == (0, 0, "scale")
    assert cause.scale == pytest.approx(1.01)
    assert len(cause.ratios) == 4  # the key bias's rounding-level gradient is left out
    assert gradients.describe(cause) == (
        "parts at step 0 (2 → 2.02); every gradient ×1.01 there (4 tensors): a scale of the loss; "
        "the same initial weights, data and learning rate"
    )


def test_curves_that_differ_within_the_tolerance_before_they_part_say_both_steps() -> None:
    """The comparison's table reads ``max |Δ| ... from step 0`` (the first step that differs at all):
    the cause names that step too, beside the one beyond the tolerance, not "parts at step 1" alone."""
    cause = gradients.loss_cause(
        [2.0, 1.9], [2.0001, 1.95], _run([GRADS] * 2), _run([GRADS] * 2, losses=(2.0001, 1.95)), rtol=1e-3, atol=1e-4
    )
    assert (cause.step, cause.differs_from) == (1, 0)
    said = gradients.describe(cause)
    assert said.startswith("differs from step 0, beyond the loss tolerance at step 1 (1.9 → 1.95); ")
    assert _cause(GRADS).differs_from is None  # differing first where it parts: "parts at step 0"


def test_a_few_layers_apart_are_named() -> None:
    cause = _cause({**GRADS, "layer.1.weight": 0.6})
    assert cause.shape == "local"
    assert [r.name for r in cause.apart] == ["layer.1.weight"]
    assert "1 of 4 gradients apart there: layer.1.weight ×2" in gradients.describe(cause)


def test_other_weights_or_data_differ_and_are_said() -> None:
    cause = _cause(
        {"embed.weight": 0.7, "layer.0.weight": 0.1, "layer.1.weight": 0.33, "head.weight": 0.2}, weights="v"
    )
    assert cause.shape == "inputs"
    assert cause.differ == ("initial weights",)
    said = gradients.describe(cause)
    assert "gradients apart there (×0.5 to ×2), as other initial weights make them: " in said
    assert "; initial weights differ" in said
    assert "the forward or the loss computed from it differs" not in said


def test_gradients_from_other_weights_or_data_are_read_as_no_shape() -> None:
    """A layer added to a team's model draws its weights from the generator, so every later tensor starts
    otherwise: its gradients sat about ×1.24 apart (×1.12 to ×1.38), which read as a loss scaled unevenly,
    and no loss was. Other data makes every gradient differ as much. Neither is read as a shape."""
    about = {k: v * r for (k, v), r in zip(GRADS.items(), (1.12, 1.2, 1.28, 1.38, 1.25), strict=True)}
    assert _cause(about).shape == "near_scale"  # from the same weights and data: a loss scaled unevenly
    for kw, started in (({"weights": "v"}, "initial weights"), ({"data": "e"}, "data")):
        cause = _cause(about, **kw)
        assert (cause.shape, cause.scale, cause.apart) == ("inputs", None, ())
        said = gradients.describe(cause)
        assert f"as other {started} make them: the gradients cannot tell what else changed" in said
        assert "a scale of the loss" not in said
    # A few tensors apart, the rest at 1, is said as it is, whatever else differs.
    assert _cause({**GRADS, "layer.1.weight": 0.6}, data="e").shape == "local"
    # Another learning rate at step 0 moved step 1's weights: step 1's gradients read no shape either;
    # one changed only after step 1 (another batch after it likewise) leaves step 1's read.
    scaled = {k: v * 1.01 for k, v in GRADS.items()}

    def at_step_1(lr: tuple[float, float], data: tuple[str, str] = ("d", "d")) -> gradients.LossCause:
        steps_a = (StepFacts(2.0, "d", (1e-3,), GRADS), StepFacts(1.9, "d", (1e-3,), GRADS))
        steps_b = (StepFacts(2.0, "d", (lr[0],), GRADS), StepFacts(1.95, data[0], (lr[1],), scaled))
        later = (StepFacts(1.8, "d", (1e-3,), GRADS), StepFacts(1.8, data[1], (1e-3,), GRADS))
        a, b = ExplainRecord("w", 3, steps=(*steps_a, later[0])), ExplainRecord("w", 3, steps=(*steps_b, later[1]))
        return gradients.loss_cause([2.0, 1.9, 1.8], [2.0, 1.95, 1.8], a, b, rtol=1e-3, atol=1e-4)

    assert (at_step_1((1e-2, 1e-3)).grad_step, at_step_1((1e-2, 1e-3)).shape) == (1, "inputs")
    assert "as other learning rates make them" in gradients.describe(at_step_1((1e-2, 1e-3)))
    assert at_step_1((1e-3, 1e-2), data=("d", "e")).shape == "scale"


def test_a_learning_rate_that_differs_before_the_losses_part_is_said_with_both_values() -> None:
    """A step's rate is read after its update: the rate after step 0 made step 1's loss, never step 0's."""

    def parting_at(step: int, *, data: str = "d", lr: float = 1e-3) -> gradients.LossCause:
        losses_b = (2.0, 1.95) if step == 1 else (2.02, 1.95)
        return gradients.loss_cause(
            [2.0, 1.9],
            list(losses_b),
            _run([GRADS] * 2),
            _run([GRADS] * 2, losses=losses_b, data=data, lr=lr),
            rtol=1e-3,
            atol=1e-4,
        )

    assert parting_at(1, data="e", lr=1e-2).differ == ("data", "learning rate")
    assert "; data, learning rate differ" in gradients.describe(parting_at(1, data="e", lr=1e-2))
    said = gradients.describe(parting_at(1, lr=1e-2))
    assert "; learning rate differs (learning rate 0.001 → 0.01 after step 0)" in said
    assert parting_at(0, lr=1e-2).differ == ()  # step 0's loss came before any update


def test_gradients_apart_at_a_step_whose_loss_agrees_are_no_forward_of_another_kind() -> None:
    """Step 0's losses agree and its gradients do not: the same forward, its gradients accumulated
    otherwise (DeepSpeed ZeRO-2 under accumulation); the losses part at step 1, after the update."""
    moved = {"embed.weight": 0.5 * 0.61, "layer.0.weight": 0.2 * 1.09, "layer.1.weight": 0.3 * 0.94, "head.weight": 0.1}
    cause = gradients.loss_cause(
        [2.0, 1.9],
        [2.0, 1.95],
        _run([GRADS, GRADS]),
        _run([moved, GRADS], losses=(2.0, 1.95)),
        rtol=1e-3,
        atol=1e-4,
    )
    assert (cause.step, cause.grad_step, cause.shape) == (1, 0, "everywhere")
    said = gradients.describe(cause)
    assert "every gradient at its own ratio at step 0, whose loss agrees (×0.61 to ×1.09; furthest " in said
    assert "embed.weight ×0.61, layer.0.weight ×1.09, layer.1.weight ×0.94" in said
    assert "accumulated otherwise" in said
    assert "the forward or the loss computed from it differs" not in said
    assert cause.last_only is None  # neither side recorded a micro-batch's gradient apart
    other_weights = gradients.loss_cause(
        [2.0, 1.9],
        [2.0, 1.95],
        _run([GRADS, GRADS]),
        _run([moved, GRADS], losses=(2.0, 1.95), weights="v"),
        rtol=1e-3,
        atol=1e-4,
    )
    # A loss may agree from other weights: their gradients are read as no more than theirs.
    assert "as other initial weights make them" in gradients.describe(other_weights)
    # Step 0's loss within the tolerance but not the same (label smoothing's 1.10684 → 1.10736): another
    # forward or loss function, not gradients computed otherwise
    smoothed = gradients.loss_cause(
        [1.10684, 1.0],
        [1.10736, 1.05],
        _run([GRADS, GRADS], losses=(1.10684, 1.0)),
        _run([moved, GRADS], losses=(1.10736, 1.05)),
        rtol=1e-3,
        atol=1e-4,
    )
    assert (smoothed.step, smoothed.grad_step) == (1, 0)
    assert "the forward or the loss computed from it differs" in gradients.describe(smoothed)
    assert "accumulated otherwise" not in gradients.describe(smoothed)


def test_an_update_that_used_its_last_micro_batch_alone_is_said() -> None:
    """Under accumulation each side records the whole gradient and its last micro-batch's: B's are the
    same tensor by tensor (its earlier micro-batches dropped), A's are not."""
    last = {"embed.weight": 0.3, "layer.0.weight": 0.1, "layer.1.weight": 0.12, "head.weight": 0.05}

    def run(grads: dict[str, float], losses: tuple[float, ...]) -> ExplainRecord:
        steps = (StepFacts(losses[0], "d", (1e-3,), grads, last), StepFacts(losses[1], "d", (1e-3,), GRADS, last))
        return ExplainRecord("w", 3, steps=steps)

    cause = gradients.loss_cause(
        [2.0, 1.9], [2.0, 1.95], run(GRADS, (2.0, 1.9)), run(last, (2.0, 1.95)), rtol=1e-3, atol=1e-4
    )
    assert (cause.grad_step, cause.last_only) == (0, "B")
    assert "B's update used its last micro-batch's gradient alone, the earlier ones dropped (A's accumulates them)" in (
        gradients.describe(cause)
    )
    # A side that recorded no micro-batch apart (an older worker, no ZeRO) says nothing of the other's.
    bare = ExplainRecord(
        "w", 3, steps=tuple(dataclasses.replace(x, last_micro=None) for x in run(GRADS, (2.0, 1.9)).steps)
    )
    assert (
        gradients.loss_cause([2.0, 1.9], [2.0, 1.95], bare, run(last, (2.0, 1.95)), rtol=1e-3, atol=1e-4).last_only
        is None
    )


def test_gradients_apart_after_step_0_may_come_from_weights_already_moved() -> None:
    """Step 0's gradients agree, step 1's do not while its loss still does: the first update may have
    moved the weights within the loss's tolerance, so nothing says the forward is the same."""
    moved = {k: v * r for (k, v), r in zip(GRADS.items(), (0.9, 1.1, 0.95, 1.2, 1.0), strict=True)}
    cause = gradients.loss_cause(
        [2.0, 1.9, 1.8],
        [2.0, 1.9001, 1.85],
        _run([GRADS, GRADS, GRADS], losses=(2.0, 1.9, 1.8)),
        _run([GRADS, moved, GRADS], losses=(2.0, 1.9001, 1.85)),
        rtol=1e-3,
        atol=1e-4,
    )
    assert (cause.step, cause.grad_step) == (2, 1)
    assert "the forward or the loss computed from it differs" in gradients.describe(cause)


def test_an_uneven_scale_is_about_one_factor() -> None:
    """The Trainer's loss summed over micro-batches of different token counts: every gradient about 4
    times, each its own (the mean over each micro-batch's tokens), none near 1."""
    uneven = {"embed.weight": 0.5 * 3.82, "layer.0.weight": 0.2 * 4.1, "layer.1.weight": 0.3 * 4.27, "head.weight": 0.4}
    cause = _cause(uneven)
    assert cause.shape == "near_scale"
    assert cause.scale == pytest.approx(4.0, rel=0.05)
    assert "every gradient about ×4.05 there (×3.82 to ×4.27, 4 tensors): a scale of the loss, applied unevenly" in (
        gradients.describe(cause)
    )
    assert _cause({**uneven, "head.weight": 0.1 * 2.0}).shape == "everywhere"  # one far off: no scale


def test_other_initial_weights_name_the_tensors_that_started_otherwise() -> None:
    """GPT-2's residual projections drawn at 0.02 instead of 0.02 / sqrt(2 n_layer), the rest alike."""
    from perfsuite.core.explain.initial import ParamStat

    a = (ParamStat("wte", 1000, 0.0, 0.02), ParamStat("h.0.c_proj", 64, 0.0, 0.00707), ParamStat("ln.bias", 8, 0, 0))
    b = (ParamStat("wte", 1000, 0.0001, 0.02), ParamStat("h.0.c_proj", 64, 0.0, 0.02), ParamStat("ln.bias", 8, 0, 0))
    run_a = dataclasses.replace(_run([GRADS]), initial=a)
    run_b = dataclasses.replace(_run([{**GRADS, "head.weight": 0.3}], weights="v", losses=(2.02, 1.95)), initial=b)
    cause = gradients.loss_cause([2.0, 1.9], [2.02, 1.95], run_a, run_b, rtol=1e-3, atol=1e-4)
    assert [m.name for m in cause.started_otherwise] == ["h.0.c_proj"]
    assert (
        "initial weights differ; 1 of 3 tensors started from other statistics: h.0.c_proj std 0.00707 → 0.02 ×2.83"
        in (gradients.describe(cause))
    )  # records without the values' digests: the statistics alone

    # With them, how many tensors started from other values too: the embedding re-drawn alike, the
    # projection drawn otherwise, the norm's bias the same zeros.
    def kept(stats: tuple[ParamStat, ...], digests: str) -> tuple[ParamStat, ...]:
        return tuple(dataclasses.replace(s, digest=d) for s, d in zip(stats, digests, strict=True))

    run_a, run_b = (
        dataclasses.replace(run_a, initial=kept(a, "abz")),
        dataclasses.replace(run_b, initial=kept(b, "cdz")),
    )
    cause = gradients.loss_cause([2.0, 1.9], [2.02, 1.95], run_a, run_b, rtol=1e-3, atol=1e-4)
    assert (
        "2 of 3 tensors started from other values, 1 of them from other statistics: h.0.c_proj std 0.00707 → 0.02"
    ) in gradients.describe(cause)
    # Every parameter the same: the digest of the whole state differs elsewhere (a buffer).
    buffered = dataclasses.replace(run_b, initial=kept(a, "abz"))
    cause = gradients.loss_cause([2.0, 1.9], [2.02, 1.95], run_a, buffered, rtol=1e-3, atol=1e-4)
    assert "each of the 3 parameters started from the same values" in gradients.describe(cause)
    # A seed re-drawn: every value other, every statistic alike.
    reseeded = dataclasses.replace(run_b, initial=kept(a, "cde"))
    cause = gradients.loss_cause([2.0, 1.9], [2.02, 1.95], run_a, reseeded, rtol=1e-3, atol=1e-4)
    assert (
        "3 of 3 tensors started from other values, each with the same statistics (another draw of the same "
        "initialisation)"
    ) in gradients.describe(cause)


def test_equal_gradients_point_to_the_update() -> None:
    cause = gradients.loss_cause(
        [2.0, 1.9], [2.0, 1.95], _run([GRADS, GRADS]), _run([GRADS, GRADS]), rtol=1e-3, atol=1e-4
    )
    assert (cause.step, cause.grad_step, cause.shape) == (1, None, "optimizer")
    assert "gradients identical up to step 1" in gradients.describe(cause)


def test_curves_that_hold_need_no_cause() -> None:
    assert gradients.first_apart([2.0, 1.9], [2.0001, 1.9], rtol=1e-3, atol=1e-4) is None
    assert gradients.first_apart([2.0, 1.9], [2.0, math.nan], rtol=1e-3, atol=1e-4) == 1
    assert gradients.loss_cause([1.0], [1.0], _run([]), _run([]), rtol=0, atol=0).step is None


# The explanation


def test_what_is_explained_follows_the_verdict() -> None:
    assert explanation.aspects("auto", time_verdict="same", memory_moved=False, loss_parted=False) == ()
    assert explanation.aspects("auto", time_verdict="slower", memory_moved=False, loss_parted=True) == ("time", "loss")
    assert explanation.aspects("auto", time_verdict="undecided", memory_moved=True, loss_parted=False) == (
        "time",
        "memory",
    )
    assert explanation.aspects("all", time_verdict="same", memory_moved=False, loss_parted=False) == explanation.ASPECTS
    assert explanation.aspects("none", time_verdict="slower", memory_moved=True, loss_parted=True) == ()


def test_the_runs_alternate_and_only_the_first_of_each_side_does_more_than_profile() -> None:
    runs = explanation.asks(explanation.ASPECTS, loss_step=3, traces=("a.json.gz", "b.json.gz"))
    assert [side for side, _ in runs] == [0, 1, 0, 1]
    assert runs[0][1] == ExplainAsk(profile_steps=3, trace="a.json.gz", grads_until=3, inventory=True)
    assert runs[3][1] == ExplainAsk(profile_steps=3)
    assert [side for side, _ in explanation.asks(["memory"], loss_step=None, traces=(None, None))] == [0, 1]
    with pytest.raises(ValueError, match="not an explanation"):
        ExplainAsk(profile_steps=-1)


def test_an_explanation_says_each_cause_and_survives_its_json() -> None:
    a = _run([GRADS], losses=(2.0,))
    b = _run([{k: v * 1.01 for k, v in GRADS.items()}], losses=(2.02,))
    profiled_a = [
        ExplainRecord("w", 3, steps=a.steps, profile=_step(), tensors=tuple(PARAMS), forward_activations=KEPT_A)
        for _ in range(2)
    ]
    profiled_b = [
        ExplainRecord(
            "w",
            3,
            steps=b.steps,
            profile=_step(mm_calls=3),
            tensors=(*PARAMS, _t("buffer", "cache", (1024,))),
            forward_activations={**KEPT_A, "LM": 21 * MiB},
        )
        for _ in range(2)
    ]
    found = explanation.explain(
        "tiny-bert-vanilla",
        explanation.ASPECTS,
        [(0, profiled_a[0]), (1, profiled_b[0]), (0, profiled_a[1]), (1, profiled_b[1])],
        loss=([2.0], [2.02]),
        breakdowns=({"buffers": 0, "activations": 20 * MiB}, {"buffers": 4096, "activations": 21 * MiB}),
        moved=["buffers", "activations"],
        loss_tolerance=(1e-3, 1e-4),
    )
    lines = found.lines()  # the loss and memory first: explained only where their checks failed
    assert lines[0] == (
        "loss: parts at step 0 (2 → 2.02); every gradient ×1.01 there (4 tensors): a scale of the loss; "
        "the same initial weights, data and learning rate"
    )
    assert lines[1].startswith("memory: buffers +4.0 KiB = 1,024 elements × 4 B (float32): new buffer cache")
    assert (
        lines[2] == "memory: activations +1.00 MiB: kept by the forward of LM +1.00 MiB (2.00 → 3.00 MiB, its own code)"
    )
    assert lines[3] == (
        "time, ops: aten::mm 2 → 3 calls/step, ≈+0.20 ms/step by its time per call: "
        "+1 from perfsuite/worker/engines/loop.py:_step (defined at line 170)"
    )
    assert lines[4].startswith(
        "time: profiled step 1.9 → 1.9 ms (under the profiler: not the verdict's time); a time is shown beyond 3 × "
    )
    assert lines[4].endswith(": ops 0.01, Python functions 0.01, Python time by package 0.01 ms/step")  # the floor
    assert found.flame
    again = explanation.Explanation.from_json(json.loads(json.dumps(found.as_json())))
    assert again == found
    assert explanation.explain("c", ["time"], [(0, a)], loss=([], []), breakdowns=({}, {}), moved=[],
                               loss_tolerance=(0, 0)).errors  # fmt: skip
