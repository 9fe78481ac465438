"""A team's repository with a history, as tests/test_own_ab.py builds it: an image model of its own
(a small convnet whose batch maker takes no sequence length) and its own training step, declared in
``pyproject.toml``, committed, then changed commit by commit, each change one thing a pull request
does to a team's code."""

from __future__ import annotations

import subprocess
from pathlib import Path

MODEL = '''"""A small convnet for 32x32 images."""

import torch
from torch import nn


class SmallConvNet(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(channels, 10)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images).flatten(1))


def build(seed: int, channels: int = 16) -> SmallConvNet:
    torch.manual_seed(seed)
    return SmallConvNet(channels)


def make_batch(batch_size: int, step: int, seed: int) -> dict:
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    images = torch.randn(batch_size, 3, 32, 32, generator=generator)
    return {"images": images, "labels": (images.mean(dim=(1, 2, 3)) > 0).long()}
'''
TRAIN = '''"""The team's own step: cross-entropy, clipped, AdamW."""

import torch
from torch.nn import functional

from perfsuite import BaseEngine


class ConvEngine(BaseEngine):
    applies = {"grad_accum_steps"}

    def __init__(self, case):
        super().__init__(case)
        self.accumulation = case.strategy.grad_accum_steps
        self.micro = case.batch_size // self.accumulation
        self.model = case.model.to(case.device).train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=case.lr)
        self.batches = 0
        # SETUP

    def step(self):
        total = torch.zeros(())
        for _ in range(self.accumulation):
            batch = self.case.batch(self.batches, self.micro)
            self.batches += 1
            loss = functional.cross_entropy(self.model(batch["images"]), batch["labels"]) / self.accumulation
            loss.backward()
            total += loss.detach()
        # STEP
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.case.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return total
'''
PYPROJECT = """[project]
name = "convnet-training"
version = "0.1"

[tool.perfsuite]
baselines = "baselines"

[tool.perfsuite.models.convnet]
factory = "convnet.model:build"
batch = "convnet.model:make_batch"
batch_size = 16
tiny = true

[tool.perfsuite.engines.conv_step]
class = "convnet.train:ConvEngine"

[tool.perfsuite.matrix]
builtin = false

[[tool.perfsuite.matrix.cases]]
models = ["convnet"]
strategies = ["vanilla", "grad_accum"]
engines = ["conv_step"]
"""
CASE = "convnet-vanilla-conv_step"

KEPT = ("        # SETUP\n", "        self.kept = torch.zeros(1024, 1024)  # 4 MiB the step never needed\n")
"""A buffer the engine keeps from then on: every case's memory grows by 4 MiB."""
SLOWER = (
    "        # STEP\n",
    "        probe = torch.randn(384, 384)\n        for _ in range(3):  # a diagnostic left in the step\n"
    "            torch.mm(probe, probe)\n",
)
"""Three 384 x 384 matmuls a step, for a log line nobody reads: a slower step, the same loss, and a peak
at most its two live tensors higher."""


def git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def commit(root: Path, subject: str, change: tuple[str, str] | None = None, readme: str | None = None) -> str:
    """Commit ``change`` (old, new) to ``convnet/train.py``, or a README line; the commit's hash."""
    if change is not None:
        train = root / "convnet" / "train.py"
        assert change[0] in train.read_text()
        train.write_text(train.read_text().replace(*change))
    if readme is not None:
        (root / "README.md").write_text((root / "README.md").read_text() + readme + "\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", subject)
    return git(root, "rev-parse", "HEAD")


def repository(root: Path, *, before: bool = False) -> Path:
    """The team's repository at its first commit (the model, its step and their declaration); ``before``:
    at the commit adopting all three, after one that held a README alone, no pyproject.toml."""
    if before:
        root.mkdir(parents=True)
        (root / "README.md").write_text("# convnet\n")
        git(root, "init", "-q", "-b", "main")
        git(root, "config", "user.email", "team@example.com")
        git(root, "config", "user.name", "Team")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "Start")
    (root / "convnet").mkdir(parents=True)
    (root / "convnet" / "__init__.py").write_text("")
    (root / "convnet" / "model.py").write_text(MODEL)
    (root / "convnet" / "train.py").write_text(TRAIN)
    (root / "pyproject.toml").write_text(PYPROJECT)
    if not before:
        (root / "README.md").write_text("# convnet\n")
        git(root, "init", "-q", "-b", "main")
        git(root, "config", "user.email", "team@example.com")
        git(root, "config", "user.name", "Team")
    commit(root, "The model and its step")
    return root
