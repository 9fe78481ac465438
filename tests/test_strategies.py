"""The strategy registry: names, composition and validation (pure, no torch)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from perfsuite.core.strategies import (
    EXTRAS,
    OPTIMIZERS,
    OPTIONAL_PACKAGES,
    STRATEGIES,
    Strategy,
    UnknownNameError,
    compose,
    install_hint,
    resolve,
)

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ISSUE_NAMES = (
    "vanilla fp16 bf16 grad_accum grad_ckpt adafactor adamw_8bit zero2_offload zero3_offload "
    "dataloader dynamic_padding smart_batching fused_adamw lion lion_8bit galore eager_attention compile lora "
    "ddp fsdp2 zero2 zero3 "
    "paged_adamw_8bit qlora activation_offload all"
).split()


def test_registry_holds_exactly_the_published_strategies() -> None:
    assert list(STRATEGIES) == ISSUE_NAMES


def test_vanilla_is_all_defaults() -> None:
    vanilla = STRATEGIES["vanilla"]
    assert (vanilla.precision, vanilla.optimizer, vanilla.padding) == ("fp32", "adamw", "max_length")
    assert vanilla.grad_accum_steps == 1
    assert not vanilla.grad_checkpointing
    assert not vanilla.uses_deepspeed


def test_all_is_the_four_published_techniques() -> None:
    combo = STRATEGIES["all"]
    assert combo.precision == "fp16"
    assert combo.grad_accum_steps == 4
    assert combo.grad_checkpointing
    assert combo.optimizer == "adafactor"
    assert combo.padding == "max_length"
    assert combo.zero_stage == 0


def test_plus_composes_registered_strategies() -> None:
    combo = resolve("bf16+grad_ckpt+smart_batching")
    assert combo.name == "bf16+grad_ckpt+smart_batching"
    assert (combo.precision, combo.grad_checkpointing, combo.length_grouped, combo.padding) == (
        "bf16",
        True,
        True,
        "longest",
    )


def test_conflicting_composition_names_both_parts() -> None:
    with pytest.raises(ValueError, match=r"'fp16' and 'bf16'.*precision"):
        resolve("fp16+bf16")


def test_invalid_combination_is_rejected_by_validation() -> None:
    with pytest.raises(ValueError, match="DeepSpeed"):
        resolve("zero2_offload+adafactor")


@pytest.mark.parametrize("name", ["fp8", "fp16+nope", "", "vanilla+"])
def test_unknown_strategy_lists_valid_names(name: str) -> None:
    with pytest.raises(UnknownNameError) as info:
        resolve(name)
    message = str(info.value)
    assert "unknown strategy" in message
    for valid in ISSUE_NAMES:
        assert valid in message


def test_strategies_are_frozen_and_keyword_only() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        STRATEGIES["fp16"].precision = "bf16"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Strategy("positional")  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"precision": "fp8"}, "precision"),
        ({"grad_accum_steps": 0}, "grad_accum_steps"),
        ({"offload_optimizer": True}, "zero_stage"),
        ({"zero_stage": 2, "offload_params": True}, "zero_stage 3"),
        ({"length_grouped": True}, "padding"),
        ({"optimizer": "sgd"}, "optimizer"),
        ({"grad_accum_steps": "four"}, "grad_accum_steps must be an integer, not 'four'"),
        ({"batch_size": 8.0}, "batch_size must be an integer, not 8.0"),
        ({"compile": 1}, "compile must be true or false, not 1"),
        ({"padding": None}, "padding must be a string, not None"),
    ],
)
def test_validation_errors(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Strategy(name="bad", **fields)  # type: ignore[arg-type]


def test_requirements_name_the_optional_packages() -> None:
    assert STRATEGIES["zero3_offload"].requires == ("deepspeed",)
    assert STRATEGIES["adamw_8bit"].requires == ("bitsandbytes",)
    assert STRATEGIES["vanilla"].requires == ()
    needs = {name: s.requires for name, s in STRATEGIES.items() if s.requires}
    assert needs == {
        "adamw_8bit": ("bitsandbytes",),
        "zero2_offload": ("deepspeed",),
        "zero3_offload": ("deepspeed",),
        "lion": ("lion_pytorch",),
        "lion_8bit": ("bitsandbytes",),
        "galore": ("galore_torch",),
        "lora": ("peft",),
        "zero2": ("deepspeed",),
        "zero3": ("deepspeed",),
        "paged_adamw_8bit": ("bitsandbytes",),
        "qlora": ("bitsandbytes", "peft"),
    }
    assert install_hint(["bitsandbytes", "peft"]) == "pip install 'perfsuite[bnb,lora]'"


def test_each_optional_package_is_the_extra_of_its_name_and_names_what_exists() -> None:
    """The one table of optional packages against pyproject.toml's extras and the strategy's fields:
    ``perfsuite[<extra>]`` installs the package, and ``perfsuite[strategies]`` every one of them."""
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    fields = {f.name for f in dataclasses.fields(Strategy)}
    for package in OPTIONAL_PACKAGES:
        assert any(req.startswith(package.distribution) for req in extras[package.extra]), package
        assert f"perfsuite[{','.join(EXTRAS.values())}]" in extras["strategies"]
        assert set(package.optimizers) <= set(OPTIMIZERS), package
        assert set(package.fields) <= fields, package
        assert package.optimizers or package.fields, f"{package.module}: no strategy would need it"
    assert len({p.extra for p in OPTIONAL_PACKAGES}) == len({p.module for p in OPTIONAL_PACKAGES}) == len(EXTRAS)


def test_compose_keeps_identical_settings() -> None:
    combo = compose(STRATEGIES["dynamic_padding"], STRATEGIES["smart_batching"])
    assert combo.padding == "longest"
    assert combo.length_grouped


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"attention": "flash"}, "attention must be one of"),
        ({"quantize_4bit": True}, "quantize_4bit needs lora_rank"),
        ({"activation_offload": True}, "it needs it"),
        ({"compile": True, "zero_stage": 2}, "compile with zero_stage"),
        ({"lora_rank": -1}, "lora_rank must be >= 0"),
        ({"optimizer": "sgd"}, "optimizer must be one of"),
    ],
)
def test_conflicting_fields_of_the_newer_strategies_are_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Strategy(name="bad", **fields)  # type: ignore[arg-type]


def test_each_strategy_names_the_package_it_needs_and_what_needs_a_gpu() -> None:
    assert STRATEGIES["lion"].requires == ("lion_pytorch",)
    assert STRATEGIES["lion_8bit"].requires == ("bitsandbytes",)
    assert STRATEGIES["galore"].requires == ("galore_torch",)
    assert STRATEGIES["lora"].requires == ("peft",)
    assert STRATEGIES["qlora"].requires == ("bitsandbytes", "peft")
    assert STRATEGIES["fused_adamw"].requires == ()
    gpu_only = {name for name, s in STRATEGIES.items() if s.gpu_only}
    assert gpu_only == {"paged_adamw_8bit", "qlora", "activation_offload"}
    assert resolve("lora+grad_accum").lora_rank == 8
