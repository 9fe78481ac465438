"""What each newer strategy claims, as checks on run records (a strategy run and its control).

Each raises AssertionError when the claim does not hold. ``test_strategy_claims.py``
checks them on real runs; ``test_claims_without_their_strategy.py`` shows each one
failing when its strategy is silently not applied, so none of them can pass vacuously.
"""

from __future__ import annotations

from typing import Any, TypeVar

import torch

from perfsuite.core.record import CaseRecord

Record = CaseRecord
T = TypeVar("T")


def known(value: T | None) -> T:
    """A figure a run that finished always has (a record types it optional: a failed run has none)."""
    assert value is not None
    return value


# Float tolerance for "the same training": identical maths in a different order
# (other matmul shapes, summed micro-batch gradients) differs in the last bits, which
# Adam's normalised updates carry into later steps. torchtune uses 1e-4 for the same check.
LOSS_RTOL = 1e-4
LOSS_ATOL = 1e-5
# Accumulation with half-precision autocast rounds each micro-batch's activations on its
# own: the trajectories agree to the precision's own loss tolerance (perfsuite.core.gates).
HALF_RTOL = {"fp16": 1e-2, "bf16": 2e-2}


def same_losses(a: Record, b: Record, *, rtol: float = LOSS_RTOL, atol: float = LOSS_ATOL) -> None:
    assert len(a.loss) == len(b.loss)
    torch.testing.assert_close(torch.tensor(a.loss), torch.tensor(b.loss), rtol=rtol, atol=atol)


def mem(record: Record, category: str) -> int:
    """A category of the record's memory breakdown (MemTracker, at the peak), in bytes."""
    value = (record.memory_breakdown_bytes or {})[category]
    assert isinstance(value, int), record.memory_breakdown_bytes
    return value


def state_bytes(record: Record) -> int:
    value = record.applied["optimizer_state_bytes"]
    assert isinstance(value, int), record.applied
    return value


def _grad_norms(record: Record) -> list[float]:
    """Each step's gradient norm (every step of these runs has one)."""
    assert None not in record.grad_norm, record.grad_norm
    return [float(v) for v in record.grad_norm if v is not None]


def _optimizer(record: Record, expected: str, name: str) -> None:
    found = record.applied["optimizer_class"]
    assert found == expected, f"trained with {found}, not {name}"


def fused_adamw(record: Record, vanilla: Record) -> None:
    _optimizer(record, "torch.optim.adamw.AdamW", "AdamW")
    assert record.applied["fused"] is True, f"param groups say fused={record.applied['fused']!r}"
    assert not vanilla.applied["fused"]
    same_losses(record, vanilla)  # the same AdamW update, one kernel instead of a loop


def lion(record: Record, vanilla: Record) -> None:
    _optimizer(record, "lion_pytorch.lion_pytorch.Lion", "Lion")
    ratio = state_bytes(record) / state_bytes(vanilla)
    # One fp32 moment per parameter where AdamW keeps two (and a step count).
    assert 0.45 <= ratio <= 0.55, f"Lion's state is {ratio:.0%} of AdamW's"


def lion_8bit(record: Record, vanilla: Record) -> None:
    _optimizer(record, "bitsandbytes.optim.lion.Lion8bit", "8-bit Lion")
    ratio = state_bytes(record) / state_bytes(vanilla)
    # One byte per parameter (plus block scales; tensors under 4096 elements stay 32-bit).
    assert ratio <= 0.2, f"8-bit Lion's state is {ratio:.0%} of AdamW's"


def galore(record: Record, vanilla: Record) -> None:
    info = record.applied.get("galore")
    assert info, "no GaLore parameter group"
    assert info["projected_parameters"] > 0
    assert info["projectors"] == info["projected_parameters"], "a projected weight has no projector"
    assert info["projector_bytes"] > 0
    rank = info["rank"]
    for moment, weight in info["moment_shapes_vs_weights"]:
        assert rank in moment, f"moment {moment} of a {weight} weight is not rank {rank}"
        assert moment != weight, f"moment {moment} is as large as its {weight} weight"
    # The projected matrices: moments of rank r and the projection, against AdamW's 8 bytes per element.
    projected = (info["projected_moment_bytes"] + info["projector_bytes"]) / (8 * info["projected_numel"])
    assert projected <= 0.5, f"GaLore keeps {projected:.0%} of AdamW's state for the weights it projects"
    # Embeddings and biases keep full AdamW state, so the whole is less, by less.
    whole = state_bytes(record) / state_bytes(vanilla)
    assert whole < 0.9, f"GaLore's whole state is {whole:.0%} of AdamW's"


def eager_attention(record: Record, vanilla: Record) -> None:
    eager, sdpa = record.attention_ops or {}, vanilla.attention_ops or {}
    assert record.applied["attention_implementation"] == "eager", (
        f"attention ran as {record.applied['attention_implementation']!r}, not eager"
    )
    assert vanilla.applied["attention_implementation"] == "sdpa"
    assert not any(k.startswith("sdpa") for k in eager), f"eager attention ran SDPA kernels: {eager}"
    assert eager.get("softmax", 0) >= 1, f"eager attention ran no softmax: {eager}"
    assert sdpa.get("sdpa", 0) + sdpa.get("sdpa_math", 0) >= 1, f"vanilla ran no SDPA: {sdpa}"
    same_losses(record, vanilla)  # the same attention maths


def compiled(record: Record) -> None:
    info = record.applied.get("compile")
    assert info, "no compile evidence"
    assert info["wrapper"] == "OptimizedModule"
    assert info["unique_graphs"] >= 1, info
    assert info["frames_ok"] >= 1, info
    assert info["graph_breaks"] == 0, info
    assert info["recompile_limit_hits"] == 0, "dynamo hit its recompile limit and fell back to eager"
    # Compilation happens in the warm-up, reported on its own: far longer than a step.
    assert record.compile_s is not None
    assert record.compile_s > 2 * record.timed().median


def lora(record: Record, vanilla: Record, *, expected_adapters: int) -> None:
    info = record.applied.get("lora")
    assert info, "no LoRA evidence"
    expected = expected_adapters
    assert info["adapter_parameters"] == expected, f"{info['adapter_parameters']} adapter parameters, not {expected}"
    assert info["trainable_parameters"] == record.applied["trainable_parameters"]
    assert info["trainable_parameters"] < 0.05 * vanilla.applied["trainable_parameters"]
    assert record.applied["frozen_parameters_with_grad"] == 0, "a frozen base weight got a gradient"
    # AdamW state: two fp32 moments per trainable parameter (plus a step count each).
    assert state_bytes(record) <= 8 * info["trainable_parameters"] * 1.05
    assert state_bytes(record) >= 8 * info["trainable_parameters"]


def lora_adapters(model: str, rank: int = 8) -> int:
    """r × (in + out) for every projection LoRA adapts, read off a built model."""
    from perfsuite.core.models import get_model_spec
    from perfsuite.worker.adapters import LORA_TARGETS
    from perfsuite.worker.modeling import build_model

    built = build_model(get_model_spec(model))
    targets = LORA_TARGETS[built.config.model_type]
    return sum(rank * sum(m.weight.shape) for name, m in built.named_modules() if name.rsplit(".", 1)[-1] in targets)


def accumulation_keeps_the_trajectory(accumulated: Record, single: Record, *, precision: str = "fp32") -> None:
    """Micro-batches summed to the same effective batch: the same loss and gradient norm, step by step."""
    assert accumulated.applied["accumulation_steps"] == 4
    assert single.applied["accumulation_steps"] == 1
    rtol = HALF_RTOL.get(precision, LOSS_RTOL)
    same_losses(accumulated, single, rtol=rtol, atol=max(LOSS_ATOL, rtol / 10))
    norms = [torch.tensor(_grad_norms(r)) for r in (accumulated, single)]
    torch.testing.assert_close(norms[0], norms[1], rtol=max(rtol, 1e-3), atol=1e-4)


# -- multi-rank cases (each record aggregates its ranks; "ranks" holds what each one held) ----


def _ranks(record: Record) -> list[dict[str, Any]]:
    ranks = [r["applied"] for r in record.ranks]
    assert len(ranks) == (record.world_size or 0) > 1, f"{len(ranks)} rank records for world size {record.world_size}"
    assert all(r is not None for r in ranks), "a rank recorded no distributed evidence"
    return ranks


def ranks_hold_the_same_parameters(record: Record) -> None:
    digests = {r["rank"]: r["parameter_digest"][:12] for r in _ranks(record)}
    assert len(set(digests.values())) == 1, f"ranks hold different parameters after the steps: {digests}"


# A token-level loss (the decoders' causal LM) averages each rank's own tokens, and DDP then
# averages the ranks' gradients: with unequal token counts per rank that is not the global
# token mean one process takes, so the updates differ slightly (transformers' Trainer
# corrects it with average_tokens_across_devices; perfsuite's loop trains as plain DDP does).
# The reported loss is the global token mean (perfsuite.worker.distributed.aggregate), so the first
# step's agrees to 2e-7; measured on tiny-gpt2 and tiny-llama at world size 2 over 14 steps,
# DDP and FSDP2 alike: the loss within 3.3e-4 relative, the gradient norm within 2.7% (the
# gradient is where the weighting differs).
TOKEN_MEAN_RTOL = 2e-3
TOKEN_MEAN_GRAD_NORM_RTOL = 5e-2


def trains_like_one_process(record: Record, single: Record) -> None:
    """The ranks' mean loss and the gradient norm equal one process's on the same global batch
    (exactly up to float order for a per-sample loss; see :data:`TOKEN_MEAN_RTOL` for a per-token one)."""
    per_token = record.task == "causal_lm"
    same_losses(record, single, rtol=TOKEN_MEAN_RTOL if per_token else LOSS_RTOL)
    norms = _grad_norms(record)
    torch.testing.assert_close(
        torch.tensor(norms),
        torch.tensor(_grad_norms(single)),
        rtol=TOKEN_MEAN_GRAD_NORM_RTOL if per_token else LOSS_RTOL,
        atol=LOSS_ATOL,
    )


def ddp(record: Record, single: Record) -> None:
    """DDP: replicated weights kept identical by all-reduced gradients, training as one process would."""
    ranks_hold_the_same_parameters(record)
    trains_like_one_process(record, single)
    for r in _ranks(record):
        assert r["accelerate_processes"] == record.world_size, r
        assert r["model_class"] == "DistributedDataParallel", r["model_class"]


def _about(part: float, whole: float, share: float, slack: float) -> bool:
    return abs(part / whole - share) <= slack


def fsdp2(record: Record, single: Record) -> None:
    """FSDP2: every parameter a DTensor sharded on dim 0, the shards adding up exactly to the
    model, each rank holding about 1/world_size of it and of AdamW's state."""
    ranks = _ranks(record)
    size = record.world_size or 0
    for r in ranks:
        assert r["dtensor_parameters"] == r["parameters"] > 0, (
            f"rank {r['rank']}: {r['dtensor_parameters']} of {r['parameters']} parameters are sharded "
            f"({r['local_parameter_numel']:,} of {r['parameter_numel']:,} elements held): not FSDP"
        )
        assert r["placements"] == ["(Shard(dim=0),)"], r["placements"]
        assert _about(r["local_parameter_numel"], r["parameter_numel"], 1 / size, 0.05), r
    total = ranks[0]["parameter_numel"]
    assert sum(r["local_parameter_numel"] for r in ranks) == total == single.num_parameters
    adamw = state_bytes(single)
    for r in ranks:
        assert _about(r["optimizer_state_bytes"], adamw, 1 / size, 0.05), (r["optimizer_state_bytes"], adamw)
    trains_like_one_process(record, single)


def zero(record: Record, single: Record, stage: int) -> None:
    """ZeRO-2: replicated weights, optimizer state partitioned; ZeRO-3: the weights partitioned
    too (about 1/world_size per rank, plus alignment padding). Both train as one process would."""
    ranks = _ranks(record)
    size = record.world_size or 0
    info = record.applied["deepspeed"]
    assert info["zero_stage"] == stage, info
    assert info["data_parallel_world_size"] == size, info
    adamw = state_bytes(single)
    for r in ranks:
        assert _about(r["optimizer_state_bytes"], adamw, 1 / size, 0.05), (r["optimizer_state_bytes"], adamw)
    if stage == 3:
        for r in ranks:
            assert _about(r["local_parameter_numel"], r["parameter_numel"], 1 / size, 0.05), (
                f"rank {r['rank']} holds {r['local_parameter_numel']:,} of {r['parameter_numel']:,} parameters"
            )
    else:
        ranks_hold_the_same_parameters(record)
    trains_like_one_process(record, single)
