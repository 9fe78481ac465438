"""A team's own model class and training step under perfsuite's gates, end to end.

A project outside perfsuite starts from ``perfsuite init --example`` (a model and an engine of
its own, which must run as written) and adds its own code: a plain torch module that is no
transformers model (a trainable head on a frozen projection of every position's features),
its batch maker, and a hand-written engine (its own loop, its loss from its dependency
``acmeops``, AdamW) that applies gradient accumulation and refuses fp16. Baselines are
refreshed and the gate passes; then three changes of the team's code each fail exactly the
cases they touch, on exactly their gate: a second forward in the step (time), an activation
the model keeps (memory), the accumulated loss no longer divided by its micro-batches (loss,
the accumulating case only). The example's cases, untouched, pass every time.

Nightly: a factory that returns the wrong thing stops the session before any case runs, and
``perfsuite ab`` compares the team's case between two versions of ``acmeops``. Real training
runs of small models (3-8 ms a step), so all of this is part of the CPU tier.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cpu, pytest.mark.slow]

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

from perfsuite.worker.engines.interface import BaseEngine


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
DECLARATION = """
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

# The CPU tier's way of gating time (calibrated steps, a case whose only failure is its time
# runs again and the majority decides), at a floor these cases' steps of 3-8 ms clear: a
# second forward makes acme's step 1.3-1.8 times as long. Any refresh is recorded, so that
# a noisy one cannot refuse to record.
[tool.perfsuite.overrides."cpu/*"]
time_floor = 0.25
time_k = 0.0
time_retries = 2
time_retry_pause_s = 0.5
max_refresh_spread = 1.0
"""
EXAMPLE_CASES = ("example-mlp-vanilla-example_step", "example-mlp-grad_accum-example_step")
ACME = {"vanilla": "acme-head-vanilla-acme_step", "grad_accum": "acme-head-grad_accum-acme_step"}
REFUSED = "acme-head-fp16-acme_step"

# (what the team changed, file, old, new, failing case → the gate it fails)
MUTATIONS = [
    (
        "a second forward in the step",
        "acme/train.py",
        "            logits = self.model(",
        "            self.model(batch['features'])  # computed again for a log, its output unused\n"
        "            logits = self.model(",
        {ACME["vanilla"]: "step time", ACME["grad_accum"]: "step time"},
    ),
    (
        "an activation the model keeps",
        "acme/models.py",
        "hidden = self.backbone(features)",
        "hidden = self.kept = self.backbone(features)",
        {ACME["vanilla"]: "memory", ACME["grad_accum"]: "memory"},
    ),
    (
        "the accumulated loss no longer divided by its micro-batches",
        "acme/train.py",
        ' batch["labels"]) / self.accumulation',
        ' batch["labels"])',
        {ACME["grad_accum"]: "loss"},
    ),
]
GATES = ("step time", "memory", "loss")


def _acmeops(directory: Path, version: str, reduction: str) -> None:
    (directory / "acmeops").mkdir(parents=True)
    text = ACMEOPS.replace("__VERSION__", version).replace("__REDUCTION__", reduction)
    (directory / "acmeops" / "__init__.py").write_text(text)


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A repository of a team's own: its model, batch maker and engine, and its dependency acmeops,
    of which this environment has 1.0 (2.0 sums the loss over the batch where 1.0 averaged it)."""
    (pytester.path / "acme").mkdir()
    (pytester.path / "acme" / "__init__.py").write_text("")
    (pytester.path / "acme" / "models.py").write_text(MODELS)
    (pytester.path / "acme" / "train.py").write_text(TRAIN)
    _acmeops(pytester.path / "deps" / "v1", "1.0", "mean")
    _acmeops(pytester.path / "deps" / "v2", "2.0", "sum")
    pytester._monkeypatch.setenv("PYTHONPATH", str(pytester.path / "deps" / "v1"))
    (pytester.path / "pyproject.toml").write_text('[project]\nname = "acme-training"\nversion = "0.1"\n')
    return pytester


def _perfsuite(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.run(sys.executable, "-m", "perfsuite", *args)


def _gate(pytester: pytest.Pytester) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-m", "cpu", "-p", "no:cacheprovider", "-rfs")


def _failures(result: pytest.RunResult) -> dict[str, str]:
    """Failed case → every line of its failure messages (each starts with the case id)."""
    text = result.stdout.str()
    failed = re.findall(r"^FAILED \S+::test_case_matches_baseline\[(\S+)\]", text, re.M)
    return {case: "\n".join(re.findall(rf"^{re.escape(case)}: .*$", text, re.M)) for case in failed}


def test_a_team_guards_its_own_model_and_step(project: pytest.Pytester) -> None:
    """Memory and loss: a kept activation and an undivided accumulated loss each fail their case."""
    _guard(project, MUTATIONS[1:])


@pytest.mark.nightly  # a failing time gate retries its case twice: 15-20 s more
def test_a_second_forward_in_the_teams_step_fails_on_its_time(project: pytest.Pytester) -> None:
    _guard(project, MUTATIONS[:1])


def _guard(project: pytest.Pytester, mutations: list[tuple[str, str, str, str, dict[str, str]]]) -> None:
    """Refresh, pass, then each of ``mutations`` fails exactly its cases on exactly its gate."""
    init = _perfsuite(project, "init", "--example")
    assert init.ret == 0, init.stderr.str()
    init.stdout.fnmatch_lines(
        ["wrote     perfsuite_example/engine.py", "appended  pyproject.toml ([[]tool.perfsuite.models.example-mlp[]]*"]
    )
    pyproject = project.path / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + DECLARATION)

    refresh = _perfsuite(project, "baselines", "refresh", "--repeats", "1", "--device", "cpu")
    assert refresh.ret == 0, refresh.stdout.str()
    written = sorted(p.stem for p in (project.path / "baselines" / "cpu").glob("*.json"))
    assert written == sorted([*EXAMPLE_CASES, *ACME.values(), f"pytest-benchmark.{_time_class()}"])
    recorded = json.loads((project.path / "baselines" / "cpu" / f"{ACME['grad_accum']}.json").read_text())
    assert recorded["spec"]["micro_batch_size"] == 4
    assert recorded["memory"]["breakdown"]["parameters"] > 0  # the factory's module, counted by MemTracker

    passed = _gate(project)
    passed.assert_outcomes(passed=4, skipped=1)
    passed.stdout.fnmatch_lines([f"*{REFUSED}*AcmeEngine applies grad_accum_steps; fp16 also sets precision='fp16'*"])

    for what, file, old, new, expected in mutations:
        source = project.path / file
        original = source.read_text()
        assert old in original, what
        source.write_text(original.replace(old, new))
        result = _gate(project)
        source.write_text(original)
        failures = _failures(result)
        assert set(failures) == set(expected), (what, result.stdout.str())
        result.assert_outcomes(passed=4 - len(expected), failed=len(expected), skipped=1)
        for case, gate in expected.items():
            assert gate in failures[case], (what, case, failures[case])
            for other in set(GATES) - {gate}:
                assert other not in failures[case].replace("peak memory", "memory"), (what, case, failures[case])


@pytest.mark.nightly
def test_a_factory_that_returns_something_else_stops_the_session_before_any_case_runs(
    project: pytest.Pytester,
) -> None:
    _perfsuite(project, "init")
    pyproject = project.path / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + DECLARATION)
    models = project.path / "acme" / "models.py"
    models.write_text(models.read_text().replace("return ProjectedHead(width)", "return {'width': width}"))
    broken = _gate(project)
    assert broken.ret == pytest.ExitCode.USAGE_ERROR
    broken.stderr.fnmatch_lines(
        ["ERROR: *pyproject.toml: tool.perfsuite.models.acme-head.factory: acme.models:build(seed=0) returned dict;*"]
    )
    assert "Traceback" not in broken.stderr.str() + broken.stdout.str()
    assert not (project.path / "baselines" / "cpu").exists()  # nothing ran, nothing was written


@pytest.mark.nightly
def test_ab_compares_the_teams_case_between_two_versions_of_its_dependency(project: pytest.Pytester) -> None:
    """This environment has acmeops 1.0; the candidate, an interpreter whose path puts 2.0 first (as a
    virtual environment with the upgrade would). Its loss differs from the first pair on; memory does not."""
    pyproject = project.path / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + "\n[tool.perfsuite.matrix]\nbuiltin = false\n" + DECLARATION)
    upgraded = project.path / "python-acmeops-2"
    v2 = project.path / "deps" / "v2"
    upgraded.write_text(f'#!/bin/sh\nPYTHONPATH="{v2}:$PYTHONPATH" exec "{sys.executable}" "$@"\n')
    upgraded.chmod(0o755)
    out = project.path / "ab.json"
    args = ["ab", "--base", "current", "--candidate", str(upgraded), "--models", "acme-head"]
    args += ["--strategies", "vanilla", "--engine", "acme_step", "--pairs", "1", "--max-pairs", "1"]
    result = _perfsuite(project, *args, "--steps", "2", "--json", str(out))
    assert result.ret == 1, result.stderr.str()  # a case regressed
    (case,) = json.loads(out.read_text())["cases"]
    assert case["case"] == ACME["vanilla"]
    assert case["verdict"] == "regressed"
    assert case["loss"]["max_abs_diff"] > 1.0  # 16 samples summed, not averaged
    assert case["memory"]["a"] == case["memory"]["b"] > 0
    result.stderr.fnmatch_lines([f"*{ACME['vanilla']}: regressed: loss*"])


def _time_class() -> str:
    from perfsuite.core.hardware import local_cpu_class

    return local_cpu_class()
