"""What broke on a GPU image's library versions (docs/gpu.md), each shown on a CPU.

The image runs transformers 5.17.0, peft 0.21.0, bitsandbytes 0.50.2 and pytest-benchmark
5.2.3; CI runs the newest of each. Three things failed there that the CPU tier never reached:
a refresh could not write pytest-benchmark's JSON, QLoRA quantized the classification head,
and activation offloading was skipped on a transformers that has it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from perfsuite.core.spec import CaseSkipped
from perfsuite.session.benchmark import JsonTarget
from perfsuite.worker.engines.common import enable_checkpointing


def test_the_benchmark_json_target_is_a_path_and_an_open_file(tmp_path: Path) -> None:
    # pytest-benchmark 5.3 opens --benchmark-json itself; 5.2 takes it as an open file (`with self.json as fh`).
    target = JsonTarget(tmp_path / "a.json")
    with open(target, "wb") as fh:
        fh.write(b"5.3")
    assert (tmp_path / "a.json").read_bytes() == b"5.3"
    target = JsonTarget(tmp_path / "b.json")
    with target as fh:
        fh.write(b"5.2")
    assert (tmp_path / "b.json").read_bytes() == b"5.2"
    assert str(target) == str(tmp_path / "b.json")


class _Checkpointed:
    """A model with one transformers version's checkpointing method; records how it was called."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []


class _Transformers517(_Checkpointed):
    def gradient_checkpointing_enable(
        self, gradient_checkpointing_kwargs: Any = None, every_n_layers: int = 1, offload: bool = False
    ) -> None:
        self.calls.append({"kwargs": gradient_checkpointing_kwargs, "offload": offload})


class _Transformers4(_Checkpointed):
    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs: Any = None) -> None:
        self.calls.append({"kwargs": gradient_checkpointing_kwargs, "offload": False})


class _Transformers524(_Checkpointed):
    def activation_checkpointing_enable(
        self, activation_checkpointing_kwargs: Any = None, every_n_layers: int = 1, offload: bool = False
    ) -> None:
        self.calls.append({"kwargs": activation_checkpointing_kwargs, "offload": offload})


@pytest.mark.parametrize("model_class", [_Transformers517, _Transformers524])
def test_activation_offload_runs_where_the_checkpointing_method_takes_offload(model_class: type) -> None:
    # transformers 5.17 has offload= on gradient_checkpointing_enable only; perfsuite looked for it on
    # activation_checkpointing_enable (5.24's name) and skipped activation_offload on the H100 image.
    model = model_class()
    enable_checkpointing(model, offload=True)
    enable_checkpointing(model)
    assert model.calls == [
        {"kwargs": {"use_reentrant": False}, "offload": True},
        {"kwargs": {"use_reentrant": False}, "offload": False},
    ]


def test_activation_offload_is_skipped_where_no_checkpointing_method_takes_offload() -> None:
    model = _Transformers4()
    with pytest.raises(CaseSkipped, match="activation offloading needs transformers >= 5.17"):
        enable_checkpointing(model, offload=True)
    assert model.calls == []


@pytest.mark.bnb
@pytest.mark.lora
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_qlora_keeps_the_classification_head_trainable_in_full_precision() -> None:
    # peft makes a classification head trainable (modules_to_save); quantized to 4 bits it cannot require
    # gradients ("only Tensors of floating point dtype can require gradients", bert-base-uncased qlora on
    # an H100). bitsandbytes 0.50 quantizes on a CPU too, so the tiny model shows it here.
    import torch

    from perfsuite.core.models import get_model_spec
    from perfsuite.worker.adapters import apply_lora, quantize_4bit
    from perfsuite.worker.modeling import build_model

    model = build_model(get_model_spec("tiny-bert"), seed=0, dropout=False)
    quantized = quantize_4bit(model, compute_dtype=torch.float32, placement="cpu")
    assert type(quantized.classifier).__name__ == "Linear"
    assert any(type(m).__name__ == "Linear4bit" for m in quantized.modules())
    peft_model = apply_lora(quantized, 8, quantized=True)
    trainable = {n for n, p in peft_model.named_parameters() if p.requires_grad}
    assert any("lora_" in n for n in trainable)
    assert any("classifier" in n and "lora_" not in n for n in trainable)
