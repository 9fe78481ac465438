"""Two real upstream regressions, each caught by ``perfsuite ab`` between the released versions and
located by ``perfsuite bisect`` (nightly: each installs overlays of transformers from the index).

- transformers 5.0.0 dropped GPT-2's scaled ``c_proj`` initialisation (std 0.02 instead of
  0.02 / sqrt(2 · n_layer)): the seeded loss curve of a GPT-2 built from its config moves
  (huggingface/transformers#47458, fixed in 5.15.0 by #47459).
- transformers 4.47.0 called ``compute_loss`` without ``num_items_in_batch`` for models that
  take loss kwargs: under gradient accumulation the Trainer's loss is the accumulation count
  times too large and clipping changes the training (fixed in 4.47.1 by #35113 and #35121;
  back in 4.48.0, huggingface/transformers#35663).

The commands and their output are in docs/bisect.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfsuite.cli import main

pytestmark = [pytest.mark.cpu, pytest.mark.nightly]

HELD = "kernels==0.12.3,datasets~=4.0"
"""Companions held at versions of those releases' time (``--with``): the overlays keep whatever is
installed that still resolves, and what the index serves today breaks the old releases at import.
transformers 5.0.0's hub-kernels integration builds a ``LayerRepository`` without a revision,
which kernels 0.19 refuses (``ValueError``); transformers 4.x's overlays resolved datasets 2.14.4,
which subclasses ``pyarrow.PyExtensionType``, gone from pyarrow 26 (``AttributeError``)."""


def _ab(tmp_path: Path, base: str, candidate: str, model: str, strategy: str, engine: str) -> dict:  # type: ignore[type-arg]
    out = tmp_path / "ab.json"
    args = ["ab", "--base", base, "--candidate", candidate, "--with", HELD, "--models", model, "--strategies", strategy]
    code = main([*args, "--engine", engine, "--pairs", "1", "--max-pairs", "1", "--json", str(out)])
    assert code == 1
    (case,) = json.loads(out.read_text())["cases"]
    return case  # type: ignore[no-any-return]


def test_gpt2_init_in_transformers_5_changes_the_loss(tmp_path: Path) -> None:
    case = _ab(tmp_path, "transformers==4.57.6", "transformers==5.0.0", "tiny-gpt2", "vanilla", "loop")
    assert case["verdict"] == "regressed"
    assert [c["metric"] for c in case["checks"] if not c["ok"]] == ["loss"]
    assert case["memory"]["a"] == pytest.approx(case["memory"]["b"], abs=64)  # the same model, other weights
    assert case["loss"]["max_abs_diff"] > 0.01
    # Explained: the residual projections started at 0.02 instead of 0.02 / sqrt(2 * n_layer); no other
    # tensor's scale moved (another may be drawn otherwise, at its own std: the generator's order).
    loss = case["explanation"]["loss"]
    assert "initial weights" in loss["differ"]
    scaled = {
        ".".join(m["name"].split(".")[-3:])
        for m in loss["started_otherwise"]
        if abs(m["b"]["std"] / m["a"]["std"] - 1) > 0.1
    }
    assert scaled == {"attn.c_proj.weight", "mlp.c_proj.weight"}
    top = loss["started_otherwise"][0]
    assert top["b"]["std"] / top["a"]["std"] == pytest.approx(8**0.5, rel=0.05)  # tiny-gpt2: 4 layers


def test_bisect_names_5_0_0_for_the_gpt2_init(tmp_path: Path) -> None:
    out = tmp_path / "bisect.json"
    args = ["bisect", "transformers", "--good", "4.57.6", "--bad", "5.2.0", "--case", "tiny-gpt2-vanilla"]
    args += ["--with", HELD]
    assert main([*args, "--metric", "loss", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["first_bad"] == "5.0.0"


def test_trainer_loss_under_accumulation_in_4_47_0(tmp_path: Path) -> None:
    case = _ab(tmp_path, "transformers==4.46.3", "transformers==4.47.0", "tiny-llama", "grad_accum", "trainer")
    assert case["verdict"] == "regressed"
    # About gradient_accumulation_steps = 4 times the loss (measured: 33.19 against 8.09 at step 0; not
    # exactly 4: each micro-batch's mean replaces the mean over the accumulated tokens).
    assert 3.5 < case["loss"]["b"][0] / case["loss"]["a"][0] < 4.5
    # Explained: every gradient about 4 times as large at step 0, the inputs alike.
    loss = case["explanation"]["loss"]
    assert (loss["step"], loss["shape"], loss["differ"]) == (0, "near_scale", [])
    assert 3.5 < loss["scale"] < 4.5


def test_bisect_names_4_47_0_for_the_accumulated_loss(tmp_path: Path) -> None:
    out = tmp_path / "bisect.json"
    args = ["bisect", "transformers", "--good", "4.46.3", "--bad", "4.48.0", "--case", "tiny-llama-grad_accum-trainer"]
    args += ["--with", HELD]
    assert main([*args, "--metric", "loss", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["first_bad"] == "4.47.0"
