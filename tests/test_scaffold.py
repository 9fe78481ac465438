"""``perfsuite init``: what it writes into a repository, and what it never overwrites."""

from __future__ import annotations

import fnmatch
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from perfsuite.cli import main
from perfsuite.cli.scaffold import TESTS, init
from perfsuite.core.declaration import read_pyproject

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
WRITTEN = [
    "pyproject.toml",
    TESTS,
    ".github/workflows/perfsuite-cpu.yml",
    ".github/workflows/perfsuite-gpu-nightly.yml",
    ".github/workflows/perfsuite-refresh.yml",
    ".github/workflows/perfsuite-upgrade.yml",
    ".github/workflows/perfsuite-upgrade-comment.yml",
    ".github/workflows/perfsuite-upgrade-gpu.yml",
    ".github/workflows/perfsuite-pr.yml",
    ".github/dependabot.yml",
    "baselines/README.md",
    "README.md",
]


def test_init_writes_what_a_repository_needs_and_says_so(tmp_path: Path) -> None:
    lines = init(tmp_path)
    assert all((tmp_path / path).is_file() for path in WRITTEN)
    assert [line.split()[1] for line in lines[:-1]] == WRITTEN
    settings = tomllib.loads((tmp_path / "pyproject.toml").read_text())["tool"]["perfsuite"]
    assert settings == {
        "baselines": "baselines",
        "tests": TESTS,
        "matrix": {"builtin": False},
        "overrides": CPU_GATES,
    }
    assert "def test_case_matches_baseline(perfsuite_case" in (tmp_path / TESTS).read_text()
    for name in ("perfsuite-cpu", "perfsuite-gpu-nightly", "perfsuite-refresh"):
        workflow = yaml.safe_load((tmp_path / ".github" / "workflows" / f"{name}.yml").read_text())
        assert workflow["permissions"] == {}  # no token unless a job asks for one
        for job_name, job in workflow["jobs"].items():
            steps = " ".join(str(step) for step in job["steps"])
            assert "__TESTS__" not in steps
            if "self-hosted" in job["runs-on"]:
                # The GPU box never runs a fork's code and never holds a write token.
                assert job["permissions"] == {"contents": "read"}, job_name
                assert "pull_request" not in workflow[True], job_name
                assert "persist-credentials': False" in steps
    from importlib.metadata import version

    comment = (tmp_path / ".github" / "workflows" / "perfsuite-upgrade-comment.yml").read_text()
    assert f"'perfsuite=={version('perfsuite')}'" in comment  # the version that wrote it
    dependabot = yaml.safe_load((tmp_path / ".github" / "dependabot.yml").read_text())
    assert dependabot["updates"][0]["package-ecosystem"] == "github-actions"


# The CPU tier's own step-time gates, as this repository sets them, with their ceiling, and the
# floor of the one CPU class that needs its own.
_OURS = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["tool"]["perfsuite"]["overrides"]
CPU_TIER = {**_OURS["cpu/*"], "time_ceiling": 0.15}
CPU_GATES = {"cpu/*": CPU_TIER, "amd-25.1-avx2/*": _OURS["amd-25.1-avx2/*"]}


def test_init_writes_gates_that_fit_the_machine(tmp_path: Path) -> None:
    """A team's CPU tier gets this repository's own CPU gates, no wider than 15%; on a machine with a
    GPU, a GPU's 5% as well. Every gate written is one perfsuite accepts."""
    from perfsuite.core.tolerance import resolve_tolerance, validate_config

    init(tmp_path, gpu=True)
    settings = tomllib.loads((tmp_path / "pyproject.toml").read_text())["tool"]["perfsuite"]
    assert settings["overrides"] == CPU_GATES
    assert settings["tolerance"] == {"time_floor": 0.05, "time_k": 3.0, "time_ceiling": 0.05}
    validate_config(settings)
    cpu = resolve_tolerance(settings, hardware="cpu", case_id="acme-vanilla", precision="fp32")
    assert (cpu.time_floor, cpu.ceiling, cpu.time_retries) == (0.15, 0.15, 2)
    slowest = resolve_tolerance(
        settings, hardware="cpu", case_id="acme-vanilla", precision="fp32", time_class="amd-25.1-avx2"
    )
    assert (slowest.time_floor, slowest.ceiling, slowest.time_retries) == (0.20, 0.20, 2)
    gpu = resolve_tolerance(settings, hardware="nvidia-h100-80gb-hbm3", case_id="acme-vanilla", precision="fp32")
    assert (gpu.time_floor, gpu.ceiling) == (0.05, 0.05)


def test_init_never_overwrites_without_force(tmp_path: Path) -> None:
    init(tmp_path)
    (tmp_path / TESTS).write_text("# mine\n")
    lines = init(tmp_path)
    assert (tmp_path / TESTS).read_text() == "# mine\n"
    assert f"kept      {TESTS} (exists; --force overwrites it)" in lines
    assert "kept      pyproject.toml (it has [tool.perfsuite] already; edit it there)" in lines
    lines = init(tmp_path, force=True)
    assert f"rewrote   {TESTS}" in lines
    assert "def test_case_matches_baseline" in (tmp_path / TESTS).read_text()


def test_init_appends_its_sections_to_existing_files(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "acme"\n')
    (tmp_path / "README.md").write_text("# acme\n")
    lines = init(tmp_path)
    assert "appended  pyproject.toml ([tool.perfsuite])" in lines
    data = tomllib.loads((tmp_path / "pyproject.toml").read_text())
    assert data["project"] == {"name": "acme"}
    assert data["tool"]["perfsuite"]["tests"] == TESTS
    readme = (tmp_path / "README.md").read_text()
    assert readme.startswith("# acme\n")
    assert "## Performance tests" in readme
    assert init(tmp_path)[-2] == "kept      README.md (it has ## Performance tests already; edit it there)"
    # The section names each workflow init writes, and the side-by-side commands a team's own code gets.
    named = re.findall(r"`(?:\.github/workflows/)?(perfsuite-[a-z*-]+\.yml)`", readme)
    for workflow in (tmp_path / ".github" / "workflows").iterdir():
        assert any(fnmatch.fnmatch(workflow.name, name) for name in named), workflow.name
    for command in ("perfsuite ab --base-ref main", "perfsuite ab --own main...HEAD", "perfsuite bisect --own"):
        assert command in readme


def test_a_pyproject_with_its_own_perfsuite_tables_is_left_alone(tmp_path: Path) -> None:
    text = '[tool.perfsuite.overrides."cpu/*"]\ntime_floor = 0.2\n'
    (tmp_path / "pyproject.toml").write_text(text)
    init(tmp_path)
    assert (tmp_path / "pyproject.toml").read_text() == text


def test_the_command_prints_each_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert all(path in out for path in WRITTEN)
    assert "next: declare your models" in out


def test_init_example_writes_a_model_an_engine_and_their_declaration_once(tmp_path: Path) -> None:
    lines = init(tmp_path, example=True)
    assert lines[-1].startswith("next: commit these files, then `perfsuite baselines refresh`")  # cases declared
    assert "wrote     perfsuite_example/model.py" in lines
    assert "wrote     perfsuite_example/engine.py" in lines
    assert "appended  pyproject.toml ([tool.perfsuite.models.example-mlp] and its engine and cases)" in lines
    settings = read_pyproject(tmp_path / "pyproject.toml")
    assert settings["engines"]["example_step"]["class"] == "perfsuite_example.engine:ExampleEngine"
    assert settings["matrix"]["cases"] == [
        {"models": ["example-mlp"], "strategies": ["vanilla", "grad_accum"], "engines": ["example_step"]}
    ]
    again = init(tmp_path, example=True)
    assert "kept      pyproject.toml (it declares the example already)" in again
    assert (tmp_path / "pyproject.toml").read_text().count("[tool.perfsuite.models.example-mlp]") == 1


@pytest.mark.usefixtures("restored_registry")  # the declarations end with the test
def test_the_commented_declarations_init_writes_declare_what_they_say_once_uncommented(tmp_path: Path) -> None:
    """A newcomer uncomments an example and fills in its names: each is a declaration perfsuite takes.
    The model of the project's own class is pointed at the code `init --example` writes."""
    from perfsuite.core.declaration import load

    init(tmp_path, example=True)
    (tmp_path / "pyproject.toml").write_text(
        (ROOT / "perfsuite" / "templates" / "pyproject-section.toml").read_text()
    )  # the comments of a plain init, in place of the example's declaration
    text = (tmp_path / "pyproject.toml").read_text()
    declared = re.compile(r"# (\[|[a-z_]+ = )")  # a commented table or key, not a comment's words
    uncommented = "\n".join(line[2:] if declared.match(line) else line for line in text.splitlines())
    uncommented = (
        uncommented.replace("my_package.models", "perfsuite_example.model")
        .replace("my_package.train:MyEngine", "perfsuite_example.engine:ExampleEngine")
        .replace('config = "models/my-encoder"', 'config = { class = "BertConfig", hidden_size = 64 }')
        .replace('data = "data/train.jsonl"', "")
        .replace('tokenizer = "models/my-encoder"', "")
    ) + '\n[[tool.perfsuite.matrix.cases]]\nmodels = ["my-mlp"]\nstrategies = ["vanilla"]\nengines = ["my_step"]\n'
    path = tmp_path / "pyproject.toml"
    path.write_text(uncommented)
    settings = tomllib.loads(uncommented)["tool"]["perfsuite"]
    assert set(settings["models"]) == {"my-encoder", "my-mlp"}
    assert settings["engines"] == {"my_step": {"class": "perfsuite_example.engine:ExampleEngine"}}
    assert load(path)


def test_init_example_leaves_a_section_it_cannot_extend_alone(tmp_path: Path) -> None:
    own = "[tool.perfsuite]\nmatrix = { builtin = false }\n"
    (tmp_path / "pyproject.toml").write_text(own)
    lines = init(tmp_path, example=True)
    assert any(
        line.startswith("kept      pyproject.toml (the example's declarations would not fit it") for line in lines
    )
    assert (tmp_path / "pyproject.toml").read_text() == own


def _tree(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize(
    ("make", "argv", "expected"),
    [
        (
            lambda root: (root / "pyproject.toml").write_text('[project]\nname = "acme"\n[tool.perfsuite\n'),
            [],
            "{root}/pyproject.toml: not valid TOML: Expected ']' at the end of a table declaration",
        ),
        (
            lambda root: (root / "pyproject.toml").write_bytes(b'[project]\nname = "caf\xe9"\n'),
            [],
            "{root}/pyproject.toml: not UTF-8 text (byte 21)",
        ),
        (lambda root: (root / "pyproject.toml").mkdir(), [], "{root}/pyproject.toml: is a directory, where"),
        (lambda root: (root / TESTS).mkdir(parents=True), ["--force"], f"{{root}}/{TESTS}: is a directory, where"),
        (
            lambda root: (root / ".github").write_text("a file"),
            [],
            "{root}/.github/workflows/perfsuite-cpu.yml: {root}/.github is not a directory",
        ),
        (lambda root: (root / "README.md").write_bytes(b"# caf\xe9\n"), [], "{root}/README.md: not UTF-8 text"),
        (
            lambda root: (root / ".github").symlink_to("/proc"),  # a directory that takes no new file, even as root
            [],
            "{root}/.github/workflows/perfsuite-cpu.yml: cannot write in {root}/.github",
        ),
    ],
    ids=[
        "invalid TOML",
        "not UTF-8",
        "pyproject a directory",
        "test a directory",
        "a file on the way",
        "README",
        "unwritable",
    ],
)
def test_init_refuses_what_it_cannot_write_in_one_line_writing_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: Any, argv: list[str], expected: str
) -> None:
    make(tmp_path)
    before = _tree(tmp_path)
    assert main(["init", "--dir", str(tmp_path), "--example", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1, captured.err
    assert captured.err.startswith(f"perfsuite: error: {expected.format(root=tmp_path)}"), captured.err
    assert captured.err.endswith("; nothing written\n")
    assert _tree(tmp_path) == before


def test_init_example_in_a_configured_project_says_one_thing_of_pyproject(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.perfsuite]\nbaselines = "baselines"\n')
    said = [line for line in init(tmp_path, example=True) if " pyproject.toml " in f"{line} "]
    assert said == ["appended  pyproject.toml ([tool.perfsuite.models.example-mlp] and its engine and cases)"]
    assert read_pyproject(tmp_path / "pyproject.toml")["baselines"] == "baselines"
