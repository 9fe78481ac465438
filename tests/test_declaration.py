"""A project's own models, strategies and matrix: ``[tool.perfsuite]`` and the registration API.

Every bad declaration is a usage error naming the file and the key, raised before a
case runs; a good one puts exactly its cases in the matrix, with their markers, and a
pytest session's declarations end with it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfsuite.core import registry
from perfsuite.core.declaration import load
from perfsuite.core.models import MODELS, ModelSpec
from perfsuite.core.registry import DeclarationError
from perfsuite.core.spec import CaseSpec
from perfsuite.core.strategies import STRATEGIES, Strategy

pytestmark = pytest.mark.usefixtures("restored_registry")  # each test's declarations end with it

TINY_BERT_CONFIG = {
    "model_type": "bert",
    "vocab_size": 512,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
}

GOOD = """
[tool.perfsuite.models.acme]
config = "models/acme"
task = "classification"
num_labels = 3
batch_size = 32
seq_len = 64
tiny = { num_hidden_layers = 1, batch_size = 8 }

[tool.perfsuite.models.widget]
config = { class = "GPT2Config", n_embd = 32, n_layer = 2, n_head = 2, vocab_size = 512 }
task = "causal_lm"
batch_size = 8
seq_len = 32
tiny = true

[tool.perfsuite.strategies.acme-recipe]
compose = ["bf16", "grad_ckpt"]
grad_accum_steps = 2
batch_size = 16

[tool.perfsuite.matrix]
builtin = false

[[tool.perfsuite.matrix.cases]]
models = ["acme"]
strategies = ["vanilla", "acme-recipe"]

[[tool.perfsuite.matrix.cases]]
models = ["widget"]
strategies = ["vanilla", "fp16+grad_ckpt"]
engines = ["loop", "trainer"]
markers = ["nightly"]
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "models" / "acme").mkdir(parents=True)
    (tmp_path / "models" / "acme" / "config.json").write_text(json.dumps(TINY_BERT_CONFIG))
    return tmp_path


def _declare(project: Path, text: str) -> None:
    path = project / "pyproject.toml"
    path.write_text(text)
    load(path)


def test_a_declaration_puts_exactly_its_cases_in_the_matrix(project: Path) -> None:
    _declare(project, GOOD)
    cases = {(c.model, c.strategy, c.engine): c.markers for c in registry.matrix_cases()}
    assert cases == {
        ("acme", "vanilla", "loop"): (),
        ("acme-tiny", "vanilla", "loop"): (),
        ("acme", "acme-recipe", "loop"): (),
        ("acme-tiny", "acme-recipe", "loop"): (),
        ("widget", "vanilla", "loop"): ("nightly",),
        ("widget", "fp16+grad_ckpt", "loop"): ("nightly",),
        ("widget", "vanilla", "trainer"): ("nightly",),
        ("widget", "fp16+grad_ckpt", "trainer"): ("nightly",),
    }
    acme, tiny = MODELS["acme"], MODELS["acme-tiny"]
    assert acme.config_dir == str(project / "models" / "acme")
    assert not acme.tiny
    assert tiny.tiny
    assert tiny.batch_size == 8
    assert tiny.config == {"num_hidden_layers": 1}
    assert acme.vocab_size == 512
    assert acme.pad_token_id == 0
    recipe = STRATEGIES["acme-recipe"]
    assert (recipe.precision, recipe.grad_checkpointing, recipe.grad_accum_steps, recipe.batch_size) == (
        "bf16",
        True,
        2,
        16,
    )
    # Undescribed: its parts' descriptions and what it sets itself (not its own name, as a part).
    parts = " + ".join(STRATEGIES[name].description for name in ("bf16", "grad_ckpt"))
    assert recipe.description == f"{parts} (grad_accum_steps=2, batch_size=16)"
    # The case carries what it resolved: a worker needs no registry.
    spec = CaseSpec(model="acme-tiny", strategy="acme-recipe")
    assert spec.model_spec is tiny
    assert spec.strategy_spec is recipe
    assert registry.source_of("model", "acme") == f"{project / 'pyproject.toml'}: tool.perfsuite.models.acme"


def test_a_model_from_a_config_directory_builds_that_architecture(project: Path) -> None:
    from perfsuite.worker.modeling import build_model

    _declare(project, GOOD)
    model = build_model(MODELS["acme-tiny"])
    assert type(model).__name__ == "BertForSequenceClassification"
    assert (model.config.num_hidden_layers, model.config.hidden_size, model.config.num_labels) == (1, 32, 3)


def test_the_builtin_matrix_stays_unless_turned_off(project: Path) -> None:
    builtin = len(registry.matrix_cases())
    _declare(project, GOOD.replace("builtin = false", "builtin = true"))
    assert len(registry.matrix_cases()) == builtin + 8


BAD = [
    ("[tool.perfsuite]\nmodles = {}\n", "tool.perfsuite: unknown key 'modles'; valid: baselines"),
    (
        '[tool.perfsuite.models.acme]\nconfig = "models/acme"\ntask = "classification"\nnum_label = 3\n',
        "tool.perfsuite.models.acme: unknown key 'num_label'; valid: config",
    ),
    (
        '[tool.perfsuite.models.acme]\nconfig = "models/empty"\ntask = "causal_lm"\n',
        "tool.perfsuite.models.acme.config: no config.json in models/empty",
    ),
    (
        '[tool.perfsuite.models.acme]\nconfig = "acme-corp/encoder"\ntask = "causal_lm"\n',
        "tool.perfsuite.models.acme.config: 'acme-corp/encoder' is neither a directory holding config.json",
    ),
    (
        '[tool.perfsuite.models.acme]\nconfig = { class = "BertConfg" }\ntask = "causal_lm"\n',
        "tool.perfsuite.models.acme.config.class: transformers has no config class 'BertConfg'",
    ),
    (
        '[tool.perfsuite.models.acme]\nconfig = "models/acme"\ntask = "regression"\n',
        "tool.perfsuite.models.acme: task must be one of",
    ),
    *(
        (
            f'[tool.perfsuite.models.acme]\nconfig = "models/acme"\ntask = "classification"\nnum_labels = 3\n{line}\n',
            f"tool.perfsuite.models.acme{where}: {message}",
        )
        for line, where, variant, message in [
            ("batch_size = -4", "", "", "batch_size must be a positive integer, not -4"),  # its worker hung
            ('batch_size = "x"', "", "", "batch_size must be a positive integer, not 'x'"),
            ("batch_size = 2.5", "", "", "batch_size must be a positive integer, not 2.5"),
            ("seq_len = 0", "", "", "seq_len must be a positive integer, not 0"),
            ("target_len = true", "", "", "target_len must be a positive integer, not True"),
            ("first_token_id = -1", "", "", "first_token_id must be an integer >= 0, not -1"),
            ("tiny = { seq_len = 0 }", ".tiny", "-tiny", "seq_len must be a positive integer, not 0"),
        ]
    ),
    (
        '[tool.perfsuite.models.acme]\nconfig = "models/acme"\ntask = "classification"\nnum_labels = "3"\n',
        "tool.perfsuite.models.acme: num_labels must be an integer >= 0, not '3'",
    ),
    (
        "[tool.perfsuite.strategies.team-recipe]\ncompose = ['bf16']\ngrad_accum_steps = 'four'\n",
        "tool.perfsuite.strategies.team-recipe: team-recipe: grad_accum_steps must be an integer, not 'four'",
    ),
    (
        "[tool.perfsuite.strategies.fast]\ngrad_checkpointing = 1\n",
        "tool.perfsuite.strategies.fast: fast: grad_checkpointing must be true or false, not 1",
    ),
    (
        "[tool.perfsuite.strategies.fast]\nprecison = 'bf16'\n",
        "tool.perfsuite.strategies.fast: unknown key 'precison'; valid: compose, description, precision",
    ),
    (
        "[tool.perfsuite.strategies.fast]\noffload_optimizer = true\n",
        "tool.perfsuite.strategies.fast: fast: offload_optimizer needs a DeepSpeed zero_stage",
    ),
    (
        "[tool.perfsuite.strategies.fast]\ncompose = ['fp16']\nprecision = 'bf16'\n",
        "tool.perfsuite.strategies.fast: cannot combine 'fp16' and 'fast': both set precision",
    ),
    (
        "[tool.perfsuite.strategies.fast]\ncompose = ['fp8']\n",
        "tool.perfsuite.strategies.fast: unknown strategy 'fp8'; valid: vanilla",
    ),
    (
        "[[tool.perfsuite.matrix.cases]]\nmodels = ['acme']\nstrategies = ['vanilla']\n",
        "tool.perfsuite.matrix.cases[0]: unknown model 'acme'; valid: bert-base-uncased",
    ),
    (
        "[[tool.perfsuite.matrix.cases]]\nmodels = ['tiny-bert']\nstrategies = ['vanila']\n",
        "tool.perfsuite.matrix.cases[0]: unknown strategy 'vanila'; valid: vanilla",
    ),
    (
        "[[tool.perfsuite.matrix.cases]]\nmodels = ['tiny-bert']\nstrategies = ['lion']\nengines = ['trainer']\n",
        "tool.perfsuite.matrix.cases[0]: lion cannot run through the trainer engine",
    ),
    (
        "[[tool.perfsuite.matrix.cases]]\nmodels = ['tiny-bert']\nstrategies = ['vanilla']\nscope = 'monthly'\n",
        "tool.perfsuite.matrix.cases[0].scope: unknown scope 'monthly'; valid: push, nightly, weekly",
    ),
    (
        "[[tool.perfsuite.matrix.cases]]\nmodels = ['tiny-bert']\nstrategies = ['vanilla']\nmarkers = ['gpu']\n",
        "tool.perfsuite.matrix.cases[0]: marker 'gpu' must be a Python identifier other than cpu, gpu",
    ),
    (
        '[tool.perfsuite.models.tiny-bert]\nconfig = "models/acme"\ntask = "classification"\nnum_labels = 2\n',
        "tool.perfsuite.models.tiny-bert: model 'tiny-bert' is already declared by perfsuite's built-in declaration",
    ),
    (
        "[tool.perfsuite.strategies.fp16]\nprecision = 'fp16'\n",
        "tool.perfsuite.strategies.fp16: strategy 'fp16' is already declared by perfsuite's built-in declaration",
    ),
    (
        '[tool.perfsuite.models.acme]\nconfig = "models/acme"\ntask = "causal_lm"\ntiny = {}\n'
        '[tool.perfsuite.models.acme-tiny]\nconfig = "models/acme"\ntask = "causal_lm"\n',
        "tool.perfsuite.models.acme-tiny: model 'acme-tiny' is already declared by",
    ),
    (
        "[tool.perfsuite.matrix]\nbuiltin = false\n"
        "[[tool.perfsuite.matrix.cases]]\nmodels = ['tiny-bert']\nstrategies = ['vanilla', 'fp16']\n"
        "[[tool.perfsuite.matrix.cases]]\nmodels = ['tiny-bert']\nstrategies = ['fp16']\n",
        "tool.perfsuite.matrix.cases[1]: the case tiny-bert × fp16 × loop is already declared by",
    ),
    (
        "[[tool.perfsuite.matrix.cases]]\nmodels = ['tiny-bert']\nstrategies = ['fp16']\n",
        "tool.perfsuite.matrix.cases[0]: the case tiny-bert × fp16 × loop is already declared by perfsuite's built-in",
    ),
    (
        "[[tool.perfsuite.matrix.cases]]\nmodels = ['tiny-bert']\nstrategies = ['ddp']\nworld_sizes = [2, 2]\n",
        "tool.perfsuite.matrix.cases[0].world_sizes names 2 twice: each world size once",
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD, ids=[m.split(": ", 1)[1][:48] for _, m in BAD])
def test_a_bad_declaration_names_the_file_and_the_key(
    project: Path, monkeypatch: pytest.MonkeyPatch, text: str, message: str
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(project / "empty-cache"))  # no hub id is cached
    (project / "models" / "empty").mkdir()
    with pytest.raises(DeclarationError) as info:
        _declare(project, text)
    assert str(info.value).startswith(f"{project / 'pyproject.toml'}: ")
    assert message in str(info.value)


def test_a_hub_id_resolves_from_the_local_cache_only(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = project / "hub"
    snapshot = cache / "models--acme-corp--encoder" / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(TINY_BERT_CONFIG))
    (cache / "models--acme-corp--encoder" / "refs").mkdir()
    (cache / "models--acme-corp--encoder" / "refs" / "main").write_text("0123abc")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    _declare(project, '[tool.perfsuite.models.acme]\nconfig = "acme-corp/encoder"\ntask = "causal_lm"\ntiny = true\n')
    assert MODELS["acme"].config_dir == str(snapshot)


def test_conftest_declarations_through_the_registration_api(pytester: pytest.Pytester) -> None:
    """A conftest.py declares a model, a recipe and cases; pytest collects exactly those, in a
    session of their own (the registry is as before once it ends)."""
    before = (dict(MODELS), dict(STRATEGIES), registry.matrix_cases())
    pytester.makeconftest(
        """
        from perfsuite import ModelSpec, Strategy, compose, register_cases, register_model, register_strategy
        from perfsuite.core.registry import use_builtin_matrix
        from perfsuite.core.strategies import STRATEGIES

        register_model(ModelSpec(name="gizmo", task="causal_lm", config_class="GPT2Config",
                                 config={"n_embd": 32, "n_layer": 1, "n_head": 2}, tiny=True))
        register_strategy(compose(STRATEGIES["grad_accum"], Strategy(name="b", batch_size=8), name="gizmo-recipe"))
        register_cases(["gizmo"], ["vanilla", "gizmo-recipe"], markers=["weekly"])
        use_builtin_matrix(False)
        """
    )
    # Not named test_matrix.py: this process has imported perfsuite's own under that name.
    pytester.makepyfile(test_gizmo_matrix=(Path(__file__).parent / "test_matrix.py").read_text())
    result = pytester.runpytest("--collect-only", "-q", "-m", "weekly", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(
        ["*test_case_matches_baseline?gizmo-vanilla?", "*gizmo-gizmo-recipe?", "2 tests collected*"]
    )
    assert (dict(MODELS), dict(STRATEGIES), registry.matrix_cases()) == before


def test_pytest_stops_on_a_bad_declaration_naming_the_file_and_key(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml("[tool.perfsuite.strategies.fast]\nprecision = 'fp8'\n")
    pytester.makepyfile(test_matrix=(Path(__file__).parent / "test_matrix.py").read_text())
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*pyproject.toml: tool.perfsuite.strategies.fast: fast: precision must be one of*"])


def test_registration_api_rejects_a_duplicate_and_a_variant_that_is_not_tiny() -> None:
    with pytest.raises(DeclarationError, match="model 'tiny-bert' is already declared by perfsuite's built-in"):
        registry.register_model(MODELS["tiny-bert"], source="conftest.py")
    big = ModelSpec(name="big", task="causal_lm", config_class="GPT2Config")
    with pytest.raises(DeclarationError, match="the CPU variant 'big-2' must be declared tiny"):
        registry.register_model(big, cpu_variant=ModelSpec(name="big-2", task="causal_lm", config_class="GPT2Config"))
    with pytest.raises(DeclarationError, match="strategy 'vanilla' is already declared"):
        registry.register_strategy(Strategy(name="vanilla"))
    assert "big" not in MODELS


def test_perfsuite_commands_stop_on_a_bad_declaration_naming_the_file_and_key(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from perfsuite.cli import main

    text = "[[tool.perfsuite.matrix.cases]]\nmodels = ['acme']\nstrategies = ['vanilla']\n"
    (project / "pyproject.toml").write_text(text)
    monkeypatch.chdir(project / "models")  # the nearest pyproject.toml above is the project's
    for command in (["run"], ["list"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert f"{project / 'pyproject.toml'}: tool.perfsuite.matrix.cases[0]: unknown model 'acme'" in err


def test_reading_a_model_declared_from_a_config_class_imports_no_torch(tmp_path: Path) -> None:
    """A team's pytest reads its declarations at every start (``--collect-only`` too): naming a
    transformers config class is checked against transformers' exports, not by resolving the class,
    which imports torch (1.8 s of a 2.8 s collection on 2 cores)."""
    import subprocess
    import sys

    path = tmp_path / "pyproject.toml"
    path.write_text(
        '[tool.perfsuite.models.widget]\nconfig = { class = "GPT2Config", n_embd = 32 }\ntask = "causal_lm"\n'
    )
    script = (
        "import sys\nfrom pathlib import Path\nimport transformers\nprint('torch' in sys.modules)\n"
        "from perfsuite.core.declaration import load\n"
        f"assert load(Path({str(path)!r}))\nprint('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    by_transformers, after_load = done.stdout.split()
    if by_transformers == "True":
        pytest.skip("this transformers imports torch itself (4.x)")
    assert after_load == "False"


def test_a_misspelt_config_field_is_refused_before_anything_runs(project: Path) -> None:
    """transformers keeps a field its config class does not know as an attribute nothing reads: the model
    is built with the default the field was meant to replace. One close to a field the class has is
    refused, naming the declaration, in the preflight every command runs before its cases; a field close
    to none, which the model's own code may read, is left to transformers."""
    from perfsuite.worker.modeling import build_config
    from perfsuite.worker.preflight import checked_first
    from perfsuite.worker.project import check_case

    _declare(project, GOOD.replace("n_embd = 32", "n_embed = 32"))
    spec = CaseSpec(model="widget", strategy="vanilla")
    assert checked_first(spec)  # a config the project declares: checked before its cases run
    assert not checked_first(CaseSpec(model="tiny-bert", strategy="vanilla"))  # perfsuite's own: by its tests
    with pytest.raises(DeclarationError) as refused:
        build_config(MODELS["widget"])
    said = f"{project / 'pyproject.toml'}: tool.perfsuite.models.widget: config: GPT2Config has no field 'n_embed': "
    assert str(refused.value).startswith(said + "did you mean 'n_embd'?")
    record = check_case(spec)
    assert (record["status"], record["error"]) == ("failed", str(refused.value))
    # The fields perfsuite's own models set that no default holds: read by the model, or taken into another.
    for name in ("tiny-t5", "tiny-llama"):  # decoder_start_token_id; rope_theta, into rope_parameters
        build_config(MODELS[name])
