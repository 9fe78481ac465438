""".ci/gpu-image/setup trusts nothing it did not check: every download is hash-pinned, the wheels it
carries are checked against the sums it wrote, and a CPU Adam build left on a warm machine is loaded
only when its SHA-256 is the one the image's owner set. Driven with a stand-in ``python3`` that
notes its arguments and plays pip and DeepSpeed."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from tools import ROOT

SETUP = ROOT / ".ci" / "gpu-image" / "setup"
WHEELS = ROOT / ".ci" / "gpu-image" / "wheels.txt"

FAKE_PYTHON = """#!/bin/sh
# Notes each call; plays `import ...` (installed: $FAKE_INSTALLED), pip, and DeepSpeed's CPU Adam build.
echo "$*" >> "$FAKE_LOG"
case "$*" in
    *"import deepspeed, bitsandbytes, perfsuite"*) [ "$FAKE_INSTALLED" = 1 ] ;;
    *CPUAdamBuilder*) mkdir -p "$TORCH_EXTENSIONS_DIR/cpu_adam"
                      echo built > "$TORCH_EXTENSIONS_DIR/cpu_adam/cpu_adam.so" ;;
    *) cat > /dev/null ;;
esac
"""


def test_every_download_is_pinned_to_its_hash() -> None:
    lines = [x for x in WHEELS.read_text().splitlines() if x and not x.startswith("#")]
    assert len(lines) >= 10
    for line in lines:
        assert re.fullmatch(r"[a-z0-9-]+==[0-9.]+ --hash=sha256:[0-9a-f]{64}", line), line
    pip = re.findall(r"python3 -m pip (download|wheel|install) (.*)", SETUP.read_text())
    assert [verb for verb, args in pip if "--require-hashes" in args] == ["download", "wheel"]


@pytest.fixture
def machine(tmp_path: Path) -> dict[str, str]:
    """A checkout with setup and a carried .whl/, a stand-in python3 first on PATH; the environment to run in."""
    repo = tmp_path / "repo"
    (repo / ".ci" / "gpu-image").mkdir(parents=True)
    shutil.copy(SETUP, repo / ".ci" / "gpu-image" / "setup")
    wheels = repo / ".whl"
    wheels.mkdir()
    (wheels / "a-1-py3-none-any.whl").write_bytes(b"wheel")
    subprocess.run("sha256sum ./*.whl > SHA256SUMS", shell=True, cwd=wheels, check=True)  # noqa: S602,S607
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(FAKE_PYTHON)
    (bin_dir / "python3").chmod(0o755)
    return {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_LOG": str(tmp_path / "calls"),
        "FAKE_INSTALLED": "1",
        "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext"),
        "REPO": str(repo),
    }


def _install(env: dict[str, str], **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(Path(env["REPO"]) / ".ci" / "gpu-image" / "setup"), "install"],
        env={**env, **extra},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def _plant(env: dict[str, str]) -> tuple[Path, str]:
    built = Path(env["TORCH_EXTENSIONS_DIR"]) / "cpu_adam" / "cpu_adam.so"
    built.parent.mkdir(parents=True)
    built.write_text("planted")
    return built, hashlib.sha256(b"planted").hexdigest()


def test_a_cpu_adam_build_left_behind_is_built_anew_unless_its_hash_was_set(machine: dict[str, str]) -> None:
    built, planted = _plant(machine)
    done = _install(machine)
    assert done.returncode == 0, done.stderr
    assert "not CPU_ADAM_SHA256" in done.stderr
    assert built.read_text() == "built\n"
    assert f"SHA-256 {hashlib.sha256(b'built' + bytes([10])).hexdigest()}" in done.stdout
    built.write_text("planted")
    wrong = _install(machine, CPU_ADAM_SHA256="0" * 64)
    assert (wrong.returncode, built.read_text()) == (0, "built\n")
    built.write_text("planted")
    kept = _install(machine, CPU_ADAM_SHA256=planted)
    assert kept.returncode == 0, kept.stderr
    assert kept.stdout.strip() == "already set up (a warm machine)"
    assert built.read_text() == "planted"


def test_wheels_that_do_not_match_their_sums_are_not_installed(machine: dict[str, str]) -> None:
    machine["FAKE_INSTALLED"] = "0"
    (Path(machine["REPO"]) / ".whl" / "a-1-py3-none-any.whl").write_bytes(b"another wheel")
    done = _install(machine)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].endswith(" wheels' again and carry it")
    assert "does not match its SHA256SUMS" in done.stderr
    assert "pip install" not in Path(machine["FAKE_LOG"]).read_text()


def test_perfsuite_is_built_with_the_carried_setuptools_and_the_images_own_stays(machine: dict[str, str]) -> None:
    machine["FAKE_INSTALLED"] = "0"
    wheels = Path(machine["REPO"]) / ".whl"
    (wheels / "setuptools-84.2.1-py3-none-any.whl").write_bytes(b"setuptools")
    subprocess.run("sha256sum ./*.whl > SHA256SUMS", shell=True, cwd=wheels, check=True)  # noqa: S602,S607
    done = _install(machine, CPU_ADAM_SHA256="")
    assert done.returncode == 0, done.stderr
    installs = [line for line in Path(machine["FAKE_LOG"]).read_text().splitlines() if "pip install" in line]
    carried, editable = installs
    assert "a-1-py3-none-any.whl" in carried
    assert "setuptools" not in carried  # into the image: every carried wheel but the build backend
    assert editable.endswith("-e .")
    assert "--find-links .whl" in editable  # built in pip's own environment, from .whl
    assert "--no-build-isolation" not in editable
