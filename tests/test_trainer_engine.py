"""The Hugging Face Trainer engine: each strategy really applied under the Trainer, the
same training as the loop engine, and the Trainer's own bugs kept visible.

Records come from the session's cache, so these claims read the matrix cases'
``-trainer`` runs (tests/test_matrix.py) and run only their dropout-free controls.

Two claims fail on the installed stack and stay as strict expected failures, naming what
upstream does (the suite measures the Trainer its users run, so perfsuite does not work
around either): when upstream fixes one, the strict marker turns the test red.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import claims
import pytest
from claims import known
from packaging.version import Version

from perfsuite.core.engines import trainer_unsupported
from perfsuite.core.record import CaseRecord
from perfsuite.core.spec import tier_spec
from perfsuite.core.strategies import resolve
from perfsuite.session import PerfsuiteSession
from perfsuite.worker.engines.trainer_setup import training_arguments

pytestmark = [pytest.mark.cpu, pytest.mark.trainer]

Run = Callable[..., CaseRecord]


def _transformers() -> Version:
    import transformers

    return Version(transformers.__version__)


# huggingface/transformers#47688 (open; reported on 5.15.0.dev0, seen here on 5.23.0): the
# Trainer skips its ÷ gradient_accumulation_steps when a model's forward declares **kwargs
# (so it "accepts loss kwargs"), but BERT's sequence-classification head drops
# num_items_in_batch and returns each micro-batch's mean: 4 micro-batches give 4× the loss
# and 4× the gradient, which clipping then cuts to a different update.
ACCUMULATION_BUG = pytest.mark.xfail(
    _transformers() >= Version("5.0"),
    reason="huggingface/transformers#47688: under gradient accumulation the Trainer does not divide a "
    "**kwargs head's loss by the accumulation steps (transformers >= 5.0, seen on 5.23.0)",
    strict=True,
)
# accelerate (1.15 here) turns fp16 autocast and the GradScaler on only for accelerators;
# TrainingArguments(fp16=True) on a CPU builds without a warning and trains in fp32. No
# upstream issue was found for it (searched huggingface/transformers and accelerate); the
# loop engine gives accelerate a CPU GradScaler and autocast itself.
CPU_FP16_IS_FP32 = pytest.mark.xfail(
    reason="accelerate enables fp16 autocast and GradScaler only on accelerators: the Trainer's fp16=True "
    "silently trains in fp32 on a CPU (accelerate 1.15, transformers 5.23; no upstream issue found)",
    strict=True,
)


# Since huggingface/transformers#46204 (merged 2026-05) the Trainer counts a causal LM's
# targets as labels[..., 1:], but only for models whose loss_type maps to ForCausalLMLoss;
# GPT2LMHeadModel's loss_type is None (its class name has no "ForCausalLM"), so its
# num_items_in_batch still counts position 0 of every row and the loss and gradient come
# out about 1/length too small (-2.4% on tiny-gpt2). No upstream issue found for GPT-2.
GPT2_TOKEN_COUNT = pytest.mark.xfail(
    _transformers() >= Version("5.0"),
    reason="the fix of huggingface/transformers#46204 misses GPT2LMHeadModel (loss_type None): the Trainer "
    "divides its loss by a token count that includes position 0 (seen on 5.23.0)",
    strict=True,
)


@pytest.fixture(scope="session")
def run(perfsuite: PerfsuiteSession) -> Run:
    def _run(strategy: str, engine: str = "trainer", *, model: str = "tiny-bert", dropout: bool = True) -> Any:
        record = perfsuite.record(tier_spec(model, strategy, engine, dropout=dropout))
        assert record.status == "ok", f"{model}-{strategy}-{engine}: {record.status}: {record.error}"
        return record

    return _run


# -- the mapping (no training) ---------------------------------------------------------


def _arguments(strategy: str) -> dict[str, Any]:
    return training_arguments(
        resolve(strategy),
        output_dir="out",
        micro_batch_size=16 // resolve(strategy).grad_accum_steps,
        lr=1e-3,
        max_grad_norm=1.0,
        seed=0,
        max_steps=16,
        on_accelerator=False,
        pin_memory=False,
        deepspeed=None,
    )


def test_every_default_the_trainer_would_choose_is_pinned() -> None:
    kwargs = _arguments("vanilla")
    # 5.x defaults that would make the same case a different training: fused AdamW, linear
    # decay to 0, weight decay, evaluation, checkpoints, trackers, progress bars, NaN filtering.
    assert kwargs["optim"] == "adamw_torch"
    assert kwargs["lr_scheduler_type"] == "constant"
    assert kwargs["weight_decay"] == 0.0
    assert kwargs["eval_strategy"] == kwargs["save_strategy"] == "no"
    assert kwargs["report_to"] == "none"
    assert kwargs["disable_tqdm"] is True
    assert kwargs["logging_steps"] == 1
    assert kwargs["logging_nan_inf_filter"] is False
    from transformers import TrainingArguments

    TrainingArguments(**kwargs)  # every name exists in the installed transformers


def test_renamed_arguments_follow_the_installed_transformers() -> None:
    import dataclasses

    from transformers import TrainingArguments

    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    ckpt = _arguments("grad_ckpt")
    prefix = "activation" if "activation_checkpointing" in names else "gradient"  # renamed in 5.23
    assert ckpt[f"{prefix}_checkpointing"] is True
    assert ckpt[f"{prefix}_checkpointing_kwargs"] == {"use_reentrant": False}
    smart = _arguments("smart_batching")
    if "train_sampling_strategy" in names:  # 5.x removed group_by_length
        assert smart["train_sampling_strategy"] == "group_by_length"
        assert "group_by_length" not in smart
    else:
        assert smart["group_by_length"] is True
    TrainingArguments(**ckpt)
    TrainingArguments(**smart)


def test_trainer_cases_have_their_own_ids_and_engines_are_checked() -> None:
    assert tier_spec("tiny-bert", "fp16", "trainer").id == "tiny-bert-fp16-trainer"
    assert tier_spec("tiny-bert", "fp16").id == "tiny-bert-fp16"
    with pytest.raises(ValueError, match="valid engines: loop, trainer"):
        tier_spec("tiny-bert", "fp16", "keras")


def test_a_strategy_the_trainer_cannot_express_says_why() -> None:
    reason = trainer_unsupported(resolve("lion"))
    assert reason is not None
    assert "lion" in reason
    assert "adamw_torch" not in reason
    assert trainer_unsupported(resolve("vanilla")) is None


def test_an_unexpressible_strategy_is_skipped_with_its_reason(perfsuite: PerfsuiteSession) -> None:
    record = perfsuite.record(tier_spec("tiny-bert", "lion", "trainer", steps=1, warmup_steps=0, profile=False))
    assert record.status == "skipped"
    assert "through the Trainer" in known(record.error)
    assert "lion" in known(record.error)


# -- claims on real Trainer runs -----------------------------------------------------------


@pytest.mark.parametrize(
    "model",
    [
        "tiny-bert",
        pytest.param("tiny-t5", marks=pytest.mark.nightly),
        pytest.param("tiny-llama", marks=pytest.mark.nightly),
        pytest.param("tiny-gpt2", marks=[pytest.mark.nightly, GPT2_TOKEN_COUNT]),
    ],
)
def test_the_same_case_trains_the_same_through_both_engines(run: Run, model: str) -> None:
    trainer, loop = run("vanilla", model=model), run("vanilla", "loop", model=model)
    assert trainer.applied["engine"] == "trainer"
    # Every optimizer step logged by the Trainer itself when the evidence is read: warm-up, timed, and
    # the memory profile's, which also counts the FLOPs.
    assert trainer.applied["trainer"]["logged_steps"] == len(trainer.loss) + 1
    assert trainer.applied["optimizer_class"] == loop.applied["optimizer_class"] == "torch.optim.adamw.AdamW"
    assert trainer.applied["weight_decay"] == [0.0]
    assert trainer.applied["learning_rates"] == [trainer.learning_rate]  # constant, no decay
    assert trainer.applied["sampler"] == "SequentialSampler"  # the loop's seeded order, read in turn
    assert trainer.padding_fraction == pytest.approx(loop.padding_fraction)
    claims.same_losses(trainer, loop)  # dropout on: both engines seed before the first step
    assert trainer.grad_norm == pytest.approx(loop.grad_norm, rel=1e-4)


def test_grad_ckpt_under_the_trainer_cuts_activations_and_keeps_the_loss(run: Run) -> None:
    ckpt, vanilla = run("grad_ckpt"), run("vanilla")
    assert ckpt.applied["gradient_checkpointing"]
    assert claims.mem(ckpt, "activations") / claims.mem(vanilla, "activations") <= 0.7
    claims.same_losses(ckpt, vanilla)
    assert known(ckpt.flops_per_step) > known(vanilla.flops_per_step)


@pytest.mark.nightly
def test_adafactor_under_the_trainer_keeps_far_less_state(run: Run) -> None:
    adafactor, vanilla = run("adafactor"), run("vanilla")
    assert adafactor.applied["optimizer_class"] == "transformers.optimization.Adafactor"
    assert claims.mem(adafactor, "optimizer_state") / claims.mem(vanilla, "optimizer_state") <= 0.15


def test_smart_batching_under_the_trainer_uses_its_length_grouped_sampler(run: Run) -> None:
    smart, vanilla = run("smart_batching"), run("vanilla")
    assert smart.applied["sampler"] == "LengthGroupedSampler"
    assert smart.applied["length_grouped"]
    assert known(smart.padding_fraction) < known(vanilla.padding_fraction) / 2


def test_grad_accum_under_the_trainer_runs_quarter_micro_batches(run: Run) -> None:
    accum, vanilla = run("grad_accum"), run("vanilla")
    assert accum.applied["accumulation_steps"] == 4
    assert accum.applied["micro_batch_size"] * 4 == vanilla.applied["micro_batch_size"]
    assert claims.mem(accum, "activations") / claims.mem(vanilla, "activations") <= 0.5


@pytest.mark.nightly  # two runs without dropout for an upstream bug's strict expected failure
@ACCUMULATION_BUG
def test_accumulation_under_the_trainer_keeps_the_loss_and_grad_norm(run: Run) -> None:
    # 32 × 1 against 8 × 4 in the suite's terms: batch 16 as 16 × 1 and 4 × 4 (tiny-bert).
    claims.accumulation_keeps_the_trajectory(run("grad_accum", dropout=False), run("vanilla", dropout=False))


@CPU_FP16_IS_FP32
def test_fp16_under_the_trainer_runs_the_forward_in_half_with_loss_scaling(run: Run) -> None:
    half = run("fp16")
    assert half.applied["autocast"], "the Trainer's accelerator has autocast off"
    assert half.applied["grad_scaler"], "the Trainer's accelerator has no GradScaler"
    counts = known(half.matmul_dtypes)
    assert counts.get("float16", 0) > counts.get("float32", 0), counts


# -- nightly: the rest of tiny-bert's strategies under the Trainer ------------------------------


@pytest.mark.nightly
def test_fused_adamw_under_the_trainer_is_torch_fused(run: Run) -> None:
    claims.fused_adamw(run("fused_adamw"), run("vanilla"))


@pytest.mark.nightly
def test_eager_attention_under_the_trainer_runs_no_sdpa_kernel(run: Run) -> None:
    claims.eager_attention(run("eager_attention"), run("vanilla"))


@pytest.mark.nightly
@pytest.mark.lora
def test_lora_under_the_trainer_trains_only_adapters(run: Run) -> None:
    claims.lora(run("lora"), run("vanilla"), expected_adapters=claims.lora_adapters("tiny-bert"))


@pytest.mark.nightly
def test_bf16_under_the_trainer_runs_the_forward_in_bf16(run: Run) -> None:
    half = run("bf16")
    assert half.applied["autocast"]
    assert not half.applied["grad_scaler"]
    counts = known(half.matmul_dtypes)
    assert counts.get("bfloat16", 0) > counts.get("float32", 0), counts


@pytest.mark.nightly
def test_dataloader_under_the_trainer_collates_in_both_workers(run: Run) -> None:
    record = run("dataloader")
    assert record.applied["num_workers"] == 2
    assert record.applied["workers_seen"] == [0, 1]
    claims.same_losses(record, run("vanilla"))  # same batches, same order


@pytest.mark.nightly
def test_dynamic_padding_under_the_trainer_pads_less_with_the_same_loss(run: Run) -> None:
    dynamic, vanilla = run("dynamic_padding", dropout=False), run("vanilla", dropout=False)
    assert known(dynamic.padding_fraction) < known(vanilla.padding_fraction)
    claims.same_losses(dynamic, vanilla)


@pytest.mark.nightly
@pytest.mark.bnb
def test_adamw_8bit_under_the_trainer_keeps_8bit_state_but_32bit_for_embeddings(run: Run) -> None:
    eight, vanilla = run("adamw_8bit"), run("vanilla")
    assert eight.applied["optimizer_class"].startswith("bitsandbytes.optim")
    # The Trainer keeps every nn.Embedding's state in 32 bits (GlobalOptimManager override),
    # so the whole is above the loop's 35% but well below AdamW's.
    ratio = claims.mem(eight, "optimizer_state") / claims.mem(vanilla, "optimizer_state")
    assert ratio < 0.9, f"8-bit AdamW state under the Trainer is {ratio:.0%} of AdamW's"


@pytest.mark.nightly
@pytest.mark.deepspeed
@pytest.mark.parametrize("strategy", ["zero2_offload", "zero3_offload"])
def test_zero_offload_under_the_trainer_runs_deepspeed_cpu_adam(run: Run, strategy: str) -> None:
    record = run(strategy)
    assert record.applied["trainer"]["deepspeed_enabled"]
    ds = record.applied["deepspeed"]
    assert ds["zero_stage"] == (2 if strategy == "zero2_offload" else 3)
    assert ds["optimizer_class"] == "DeepSpeedCPUAdam"
    assert ds["optimizer_state_devices"] == ["cpu"]


@pytest.mark.nightly
@CPU_FP16_IS_FP32
def test_all_under_the_trainer_applies_every_published_technique(run: Run) -> None:
    applied = run("all").applied
    assert applied["gradient_checkpointing"]
    assert applied["accumulation_steps"] == 4
    assert applied["optimizer_class"] == "transformers.optimization.Adafactor"
    assert applied["grad_scaler"], "fp16's GradScaler"


def _small_engine(strategy: str = "vanilla") -> Any:
    import torch

    from perfsuite.core.models import get_model_spec
    from perfsuite.worker.data import generate_dataset
    from perfsuite.worker.device import get_device
    from perfsuite.worker.engines.common import OwnCase
    from perfsuite.worker.engines.hf_trainer import HFTrainerEngine
    from perfsuite.worker.modeling import build_model

    spec = get_model_spec("tiny-bert")
    case = OwnCase(
        case_id=f"tiny-bert-{strategy}-trainer",
        model=build_model(spec, seed=0),
        strategy=resolve(strategy),
        device=torch.device("cpu"),
        batch_size=8,
        seq_len=32,
        lr=1e-3,
        max_grad_norm=1.0,
        seed=0,
        max_steps=4,
        hardware=get_device("cpu"),
        dataset=generate_dataset(spec, num_samples=64, seq_len=32, seed=0),
        model_spec=spec,
        tokenizer=None,
        deepspeed=None,
        pin_memory=False,
    )
    return HFTrainerEngine(case)


def test_without_a_sequential_option_a_trainer_subclass_keeps_the_order(monkeypatch: pytest.MonkeyPatch) -> None:
    from perfsuite.worker.engines import trainer_setup

    monkeypatch.setattr(trainer_setup, "sequential_option", lambda: False)  # transformers 4.x, early 5.x
    assert "train_sampling_strategy" not in _arguments("vanilla")
    engine = _small_engine()
    try:
        engine.step()
        assert type(engine.hf).__name__ == "SequentialTrainer"
        assert engine.evidence()["sampler"] == "SequentialSampler"
    finally:
        engine.close()


def test_an_error_inside_a_trainer_step_fails_the_step_and_close_returns() -> None:
    import contextlib

    engine = _small_engine()

    @contextlib.contextmanager
    def broken() -> Any:
        yield
        raise RuntimeError("an instrument broke")

    try:
        assert engine.step().loss.item() > 0
        with pytest.raises(RuntimeError, match="an instrument broke"):
            engine.step(within=broken())
        with pytest.raises(RuntimeError, match="the Trainer stopped after"):
            engine.step()
    finally:
        engine.close()
    assert engine._thread is not None
    assert not engine._thread.is_alive()
