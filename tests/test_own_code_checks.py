"""A team's own code that is not what its declaration promises: one line naming the file, the key and
what was expected, before anything runs.

Declarations are checked where they are read, without importing the team's code (pure: the
module is found and read); what the code returns or raises is checked in a worker before any
case runs (:mod:`perfsuite.worker.preflight`), here called in this process. Then the engine
interface itself: a refused strategy is a skip with the engine's reason, a step's loss becomes
the record's, and what is not a loss is an error naming the engine's declaration.
"""

from __future__ import annotations

import re
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from perfsuite.cli import main
from perfsuite.core import registry
from perfsuite.core.declaration import load
from perfsuite.core.registry import DeclarationError
from perfsuite.core.spec import CaseSkipped, CaseSpec
from perfsuite.core.strategies import STRATEGIES

pytestmark = pytest.mark.usefixtures("restored_registry")  # each test's declarations end with it

MODEL = """
import torch


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.layer(x)


def build(seed, width=4):
    return Tiny()


def make_batch(batch_size, seq_len, step, seed):
    return {"x": torch.ones(batch_size, 4), "y": torch.zeros(batch_size, dtype=torch.long)}


def returns_a_dict(seed):
    return {"model": Tiny()}


def raises(seed):
    raise ValueError("no weights file")


def batch_of_lists(batch_size, seq_len, step, seed):
    return {"x": [1, 2, 3]}


def takes_no_seed():
    return Tiny()


def image_batch(batch_size, step, seed):
    # An image model: no sequence length to take.
    return {"x": torch.full((batch_size, 4), float(step)), "y": torch.zeros(batch_size, dtype=torch.long)}


def needs_device(batch_size, step, device):
    return {"x": torch.ones(batch_size, 4, device=device)}
"""
ENGINE = """
import torch

from perfsuite import BaseEngine


class Step(BaseEngine):
    applies = {"grad_accum_steps"}

    def __init__(self, case):
        super().__init__(case)
        self.model = case.model
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=case.lr)
        self.calls = 0

    def step(self):
        self.calls += 1
        batch = self.case.batch(self.calls)
        loss = torch.nn.functional.cross_entropy(self.model(batch["x"]), batch["y"])
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        return loss if self.calls < 3 else {"loss": loss}


class Unversioned:
    def __init__(self, case):
        pass

    def step(self):
        return 0.0

    def evidence(self):
        return {}

    def close(self):
        pass


class Raises(BaseEngine):
    def __init__(self, case):
        raise RuntimeError("no GPU")


class Plain(Step):
    applies = ()  # says nothing of what it applies: every strategy but vanilla is refused


class TakesBatch(Step):
    def step(self, batch):
        return super().step()


class InheritsTakesBatch(TakesBatch):
    pass  # its step is its parent's: only the import shows it


class AppliesAStrategy(Step):
    applies = frozenset({"grad_accum_steps", "grad_ckpt"})  # a strategy's name, not the field it sets


def not_a_class(case):
    return None
"""


@pytest.fixture
def team(tmp_path: Path) -> Iterator[str]:
    """A package of a team's code under a name of its own (this process imports it), removed after."""
    name = f"team_{uuid.uuid4().hex[:8]}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / name / "models.py").write_text(MODEL)
    (tmp_path / name / "train.py").write_text(ENGINE)
    (tmp_path / name / "broken.py").write_text("import torch\nVALUE = 1 / 0\n")
    yield name
    for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
        del sys.modules[module]
    if str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


def _declaration(team: str, factory: str = "build", batch: str = "make_batch", engine: str = "train:Step") -> str:
    return f"""
[tool.perfsuite.models.mine]
factory = "{team}.models:{factory}"
batch = "{team}.models:{batch}"
batch_size = 4
seq_len = 8
tiny = true

[tool.perfsuite.engines.mine_step]
class = "{team}.{engine}"

[tool.perfsuite.matrix]
builtin = false

[[tool.perfsuite.matrix.cases]]
models = ["mine"]
strategies = ["vanilla", "grad_accum", "bf16"]
engines = ["mine_step"]
"""


def _declare(root: Path, text: str) -> Path:
    path = root / "pyproject.toml"
    path.write_text(text)
    load(path)
    return path


def test_a_declaration_of_own_code_puts_its_cases_in_the_matrix(tmp_path: Path, team: str) -> None:
    path = _declare(tmp_path, _declaration(team))
    cases = {(c.model, c.strategy, c.engine): c.markers for c in registry.matrix_cases()}
    assert cases == {("mine", s, "mine_step"): ("mine_step",) for s in ("vanilla", "grad_accum", "bf16")}
    spec = CaseSpec(model="mine", strategy="vanilla", engine="mine_step")
    assert spec.id == "mine-vanilla-mine_step"
    assert spec.engine_spec is not None
    assert spec.engine_spec.engine_class == f"{team}.train:Step"
    assert spec.model_spec.declared_at == f"{path}: tool.perfsuite.models.mine"
    assert team not in sys.modules  # found and read, not imported
    from perfsuite.core.spec import parse_case_id

    assert parse_case_id("mine-grad_accum-mine_step") == ("mine", "grad_accum", "mine_step", 1)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (('factory = "', 'factory = "nowhere.'), r"models\.mine\.factory: no module nowhere\.team_\w+\.models in"),
        (("models:build", "models:nothing"), r"models\.mine\.factory: team_\w+\.models \(.*\) defines no nothing"),
        (("models:build", "models"), r"models\.mine\.factory: .* is not a reference"),
        (('batch = "', 'batches = "'), r"models\.mine: unknown key 'batches'"),
        (("[tool.perfsuite.engines.mine_step]", "[tool.perfsuite.engines.mine-step]"), r"must be a Python identifier"),
        (("class = ", "klass = "), r"engines\.mine_step: unknown key 'klass'"),
        (('engines = ["mine_step"]', 'engines = ["loop"]'), r"mine is built by the project's factory: .* not loop"),
    ],
)
def test_a_declaration_that_cannot_be_used_names_its_file_and_key(
    tmp_path: Path, team: str, change: tuple[str, str], message: str
) -> None:
    text = _declaration(team)
    assert change[0] in text
    with pytest.raises(DeclarationError, match=message) as caught:
        _declare(tmp_path, text.replace(*change, 1))
    assert str(caught.value).startswith(f"{tmp_path / 'pyproject.toml'}: ")
    assert "\n" not in str(caught.value)


def test_an_engine_of_the_project_trains_only_its_factory_models(tmp_path: Path, team: str) -> None:
    text = _declaration(team).replace('models = ["mine"]', 'models = ["tiny-bert"]')
    with pytest.raises(DeclarationError, match="trains models the project builds with a factory; tiny-bert"):
        _declare(tmp_path, text)


def test_a_model_the_factory_builds_named_without_an_engine_trains_through_the_projects(
    tmp_path: Path, team: str
) -> None:
    """``--models mine`` without ``--engine``: the engines the matrix pairs it with (else the project's
    only one), as a built-in model's is the loop; several and none paired: one line naming them."""
    from argparse import Namespace

    from perfsuite.cli.selection import matrix_selection

    before = registry.snapshot()
    _declare(tmp_path, _declaration(team))

    def chosen(**given: Any) -> list[tuple[str, str, str, int]]:
        fields = {"models": ["mine"], "strategies": ["vanilla"], "engine": None, "world_size": 1, **given}
        return matrix_selection(Namespace(all=False, every_push=False, scope=None, **fields), "cpu")

    assert chosen() == [("mine", "vanilla", "mine_step", 1)]
    with pytest.raises(ValueError, match=r"^mine_step \(the engine of mine\) runs no case of 2 ranks"):
        chosen(strategies=None, world_size=2)
    assert chosen(models=["mine", "tiny-bert"]) == [
        ("mine", "vanilla", "mine_step", 1),
        ("tiny-bert", "vanilla", "loop", 1),
    ]
    unpaired = _declaration(team).partition("[[tool.perfsuite.matrix.cases]]")[0]  # the matrix pairs it with none
    registry.restore(before)
    _declare(tmp_path, unpaired)
    assert chosen() == [("mine", "vanilla", "mine_step", 1)]  # the project's only engine
    registry.restore(before)
    _declare(tmp_path, f'{unpaired}\n[tool.perfsuite.engines.other_step]\nclass = "{team}.train:Plain"\n')
    with pytest.raises(ValueError, match=r"^mine is built by .*: name it with --engine \(mine_step, other_step\)$"):
        chosen()
    assert chosen(engine=["other_step"]) == [("mine", "vanilla", "other_step", 1)]


def test_a_case_through_the_wrong_kind_of_engine_names_the_engine_and_the_case_id(tmp_path: Path, team: str) -> None:
    _declare(tmp_path, _declaration(team))
    # The id bisect --case takes, then the option run and ab take.
    said = (
        r"mine is built by the project's factory .* not loop: the case mine-vanilla-mine_step \(--engine mine_step\)$"
    )
    with pytest.raises(ValueError, match=said):
        CaseSpec(model="mine", strategy="vanilla", engine="loop")
    with pytest.raises(ValueError, match="mine_step trains the models the project builds with a factory; tiny-bert"):
        CaseSpec(model="tiny-bert", strategy="vanilla", engine="mine_step")
    # Ranks are launched by the loop alone: no engine of the project's is offered for them.
    with pytest.raises(ValueError, match="whose engines train one process; a case of 2 ranks runs through the loop"):
        CaseSpec(model="mine", strategy="ddp", engine="loop", world_size=2)
    with pytest.raises(ValueError, match=r"the case tiny-bert-ddp-ws2 \(--engine loop\)$"):
        CaseSpec(model="tiny-bert", strategy="ddp", engine="mine_step", world_size=2)


def _check(tmp_path: Path, team: str, **names: str) -> dict[str, Any]:
    from perfsuite.worker.project import check_case

    _declare(tmp_path, _declaration(team, **names))
    return check_case(CaseSpec(model="mine", strategy="vanilla", engine="mine_step"))


@pytest.mark.parametrize(
    ("names", "message"),
    [
        ({}, None),
        ({"factory": "returns_a_dict"}, r"models\.mine\.factory: \S+:returns_a_dict\(seed=0\) returned dict; expected"),
        (
            {"factory": "raises"},
            r"models\.mine\.factory: \S+:raises\(seed=0\) raised ValueError: no weights file \(at models\.py:\d+\);",
        ),
        ({"batch": "image_batch"}, None),
        (
            {"engine": "train:InheritsTakesBatch"},
            r"engines\.mine_step\.class: \S+:InheritsTakesBatch\.step\(self, batch\) cannot be called as step\(\)",
        ),
        ({"batch": "batch_of_lists"}, r"models\.mine\.batch: \S+:batch_of_lists returned 'x': list; expected"),
        ({"engine": "train:Unversioned"}, r"engines\.mine_step\.class: \S+ declares no api_version; this perfsuite"),
        ({"engine": "train:not_a_class"}, r"engines\.mine_step\.class: \S+ is a function, not a class"),
        ({"engine": "broken:VALUE"}, r"engines\.mine_step\.class: cannot import \S+\.broken: ZeroDivisionError"),
    ],
)
def test_code_that_returns_the_wrong_thing_or_raises_is_named_before_anything_runs(
    tmp_path: Path, team: str, names: dict[str, str], message: str | None
) -> None:
    record = _check(tmp_path, team, **names)
    if message is None:
        assert record["status"] == "ok", record
        return
    assert record["status"] == "failed"
    assert str(record["error"]).startswith(f"{tmp_path / 'pyproject.toml'}: tool.perfsuite.")
    assert re.search(message, record["error"]), record["error"]


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (
            {"engine": "train:TakesBatch"},
            r"engines\.mine_step\.class: \S+:TakesBatch \(\S+train\.py, line \d+\): TakesBatch\.step\(self, batch\) "
            r"requires batch; perfsuite calls step\(\) with no argument",
        ),
        (
            {"engine": "train:AppliesAStrategy"},
            r"engines\.mine_step\.class: \S+:AppliesAStrategy \(\S+train\.py, line \d+\): AppliesAStrategy\.applies "
            r"names 'grad_ckpt' \(did you mean 'grad_checkpointing'\?\): not a strategy field; the fields: precision, ",
        ),
        (
            {"factory": "takes_no_seed"},
            r"models\.mine\.factory: \S+:takes_no_seed \(\S+models\.py, line \d+\): takes_no_seed\(\) takes no seed, "
            "which perfsuite passes",
        ),
        (
            {"batch": "needs_device"},
            r"models\.mine\.batch: \S+:needs_device .*: needs_device\(batch_size, step, device\) requires device, "
            r"which perfsuite does not pass \(it passes batch_size=, seq_len=, step=, seed=\)",
        ),
    ],
)
def test_a_signature_perfsuite_cannot_call_is_named_when_the_declaration_loads(
    tmp_path: Path, team: str, names: dict[str, str], message: str
) -> None:
    """The engine's own step and the factory's and batch maker's parameters are read from their source with
    the declaration, before any worker starts: one line naming the file and the key."""
    with pytest.raises(DeclarationError, match=message) as caught:
        _declare(tmp_path, _declaration(team, **names))
    assert str(caught.value).startswith(f"{tmp_path / 'pyproject.toml'}: tool.perfsuite.")
    assert "\n" not in str(caught.value)


def test_a_factory_argument_the_factory_does_not_take_is_named(tmp_path: Path, team: str) -> None:
    text = _declaration(team).replace("seq_len = 8\n", "seq_len = 8\nfactory_args = { depth = 2 }\n")
    with pytest.raises(DeclarationError, match=r"factory: .*build\(seed, width=4\) takes no depth, which perfsuite"):
        _declare(tmp_path, text)


def _built(tmp_path: Path, team: str, strategy: str, engine: str = "train:Step") -> Any:
    from perfsuite.worker.build import build

    _declare(tmp_path, _declaration(team, engine=engine))
    spec = CaseSpec(model="mine", strategy=strategy, engine="mine_step", device="cpu", steps=3, warmup_steps=0)
    return spec, build(spec)


def test_a_strategy_the_engine_does_not_apply_is_a_skip_with_its_reason(tmp_path: Path, team: str) -> None:
    with pytest.raises(CaseSkipped, match=r"^Step applies grad_accum_steps; bf16 also sets precision='bf16'$"):
        _built(tmp_path, team, "bf16")


def test_an_engine_that_names_no_field_it_applies_refuses_every_strategy_but_vanilla(tmp_path: Path, team: str) -> None:
    with pytest.raises(
        CaseSkipped, match=r"^Plain applies no strategy field; grad_accum also sets grad_accum_steps=4$"
    ):
        _built(tmp_path, team, "grad_accum", engine="train:Plain")
    from perfsuite.worker.build import build

    vanilla = build(
        CaseSpec(model="mine", strategy="vanilla", engine="mine_step", device="cpu", steps=3, warmup_steps=0)
    )
    assert type(vanilla.engine).__name__ == "Plain"


def test_an_engine_that_raises_while_built_names_its_declaration(tmp_path: Path, team: str) -> None:
    # Where in the project's code: its traceback is not shown, the frame that raised is
    raised = r"mine_step\.class: \S+:Raises\(case\) raised RuntimeError: no GPU \(at train\.py:\d+\)"
    with pytest.raises(DeclarationError, match=raised):
        _built(tmp_path, team, "vanilla", engine="train:Raises")


def test_a_step_returns_its_loss_and_anything_else_names_the_engine(tmp_path: Path, team: str) -> None:
    from perfsuite.worker.engines.driven import Driven

    spec, built = _built(tmp_path, team, "grad_accum")
    assert built.dataset == f"batch:{team}.models:make_batch"
    assert built.model_config == {"factory": f"{team}.models:build", "factory_args": {}}
    engine = Driven(built.engine, device_type="cpu", tokens=32, where="declared here")
    out = engine.step()
    assert out.loss.dim() == 0
    assert (out.grad_norm, out.real_tokens, out.padded_tokens, out.skipped) == (None, 32, 32, False)
    assert engine.inner_optimizer is built.engine.optimizer
    entered: list[str] = []

    class Within:
        def __enter__(self) -> None:
            entered.append("enter")

        def __exit__(self, *exc: object) -> None:
            entered.append("exit")

    engine.step(before_micro_batch=lambda: entered.append("forward"), within=Within())
    assert entered == ["enter", "forward", "exit"]  # the hook before the model's forward, inside `within`
    with pytest.raises(DeclarationError, match=r"^declared here: Step\.step\(\) returned dict; expected the step's"):
        engine.step()


def test_perfsuite_run_stops_before_anything_runs(
    tmp_path: Path, team: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pyproject.toml").write_text(_declaration(team, factory="returns_a_dict"))
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"perfsuite: error: {tmp_path / 'pyproject.toml'}: tool.perfsuite.models.mine.factory: ")
    assert "mine-vanilla" not in err.replace("models.mine.", "")  # no case ran
    assert "Traceback" not in err


def test_refuse_unless_names_every_field_a_strategy_sets() -> None:
    from perfsuite import Unsupported, refuse_unless

    refuse_unless(STRATEGIES["vanilla"], (), "mine")
    refuse_unless(STRATEGIES["grad_accum"], {"grad_accum_steps"}, "mine")
    with pytest.raises(Unsupported, match=r"mine applies no strategy field; all also sets .*grad_accum_steps=4"):
        refuse_unless(STRATEGIES["all"], (), "mine")
    with pytest.raises(ValueError, match=r"mine\.applies names 'grad_acumulation' \(did you mean 'grad_accum_steps'"):
        refuse_unless(STRATEGIES["vanilla"], {"grad_acumulation"}, "mine")


@pytest.mark.parametrize("name", ["skip", "xfail", "nightly", "cpu"])
def test_an_engine_may_not_be_named_as_a_marker_with_a_meaning(name: str) -> None:
    from perfsuite.core import registry
    from perfsuite.core.engines import PROJECT_ENGINES, EngineSpec

    with pytest.raises(DeclarationError, match=rf"engine name '{name}' is a"):
        registry.register_engine(EngineSpec(name=name, engine_class="acme.train:Step"), source="here")
    assert name not in PROJECT_ENGINES
