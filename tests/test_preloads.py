"""The forkserver imports what the session's cases need, once, instead of every worker importing it."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import fault_cases
import pytest

from perfsuite.core.engines import OWN_ENGINES
from perfsuite.core.preloads import (
    CPU_ADAM_ENV,
    CUDA_AT_IMPORT,
    ENV,
    MODEL_CLASSES_ENV,
    preload_environ,
    preload_for,
    preload_modules,
)
from perfsuite.core.spec import CaseSpec

TRAINER_MODULE = OWN_ENGINES["trainer"].module


def _spec(strategy: str, engine: str = "loop") -> CaseSpec:
    return CaseSpec(model="tiny-bert", strategy=strategy, engine=engine, device="cpu")


def test_only_a_session_with_an_optimizer_offloaded_loads_deepspeeds_cpu_adam(monkeypatch: pytest.MonkeyPatch) -> None:
    """DeepSpeed builds its CPU Adam only to offload the optimizer: ZeRO without offload wraps torch's
    AdamW, and a first build on a machine costs 30 s on 2 cores."""
    for name in (ENV, MODEL_CLASSES_ENV, CPU_ADAM_ENV):  # restored after
        monkeypatch.setenv(name, os.environ.get(name, ""))
    sessions = [(["vanilla", "zero2", "zero3"], "0"), (["zero2", "zero2_offload"], "1"), (["zero3_offload"], "1")]
    for strategies, loads in sessions:
        preload_for([_spec(s) for s in strategies])
        assert os.environ[CPU_ADAM_ENV] == loads, strategies
    assert preload_environ([_spec("vanilla")])[CPU_ADAM_ENV] == "0"
    assert os.environ[CPU_ADAM_ENV] == "1"  # for a side's server (perfsuite.ab.sides), not this process


@pytest.mark.deepspeed
def test_a_forkserver_leaves_cpu_adam_to_the_cases_where_a_build_lock_is_left(tmp_path: Path) -> None:
    """torch waits for ever on a build's lock: one left by a build killed half-way (Ctrl-C in the first
    build on a machine) would hang the forkserver, and every case behind it, where a case waits
    within its time limit."""
    import subprocess
    import sys

    (tmp_path / "cpu_adam").mkdir()
    (tmp_path / "cpu_adam" / "lock").touch()
    code = (
        "from perfsuite.worker.engines.deepspeed import load_cpu_adam; load_cpu_adam(); "
        "from deepspeed.ops.op_builder.builder import OpBuilder; print(sorted(OpBuilder._loaded_ops))"
    )
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path), "DS_ACCELERATOR": "cpu"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"
    assert not (tmp_path / "cpu_adam" / "cpu_adam.so").exists()


def test_each_case_names_what_it_imports_beyond_the_base_set() -> None:
    assert preload_modules([_spec("vanilla"), _spec("fp16"), _spec("grad_ckpt")]) == ()
    assert preload_modules([_spec("adafactor")]) == ("transformers.optimization",)
    assert preload_modules([_spec("adamw_8bit")]) == ("bitsandbytes",)
    assert preload_modules([_spec("lora")]) == ("peft",)
    assert preload_modules([_spec("zero2_offload")]) == ("deepspeed",)
    assert preload_modules([_spec("vanilla", "trainer")]) == (TRAINER_MODULE,)
    both = preload_modules([_spec("all"), _spec("lora"), _spec("lora")])
    assert both == ("peft", "transformers.optimization")  # the union, once each, in a stable order


def test_on_a_gpu_machine_nothing_that_creates_a_cuda_context_is_preloaded() -> None:
    """bitsandbytes reads every GPU's compute capability at import (so do peft and transformers'
    integrations, which import it), DeepSpeed detects its accelerator: a forkserver that initialised
    CUDA so would break every GPU worker."""
    from perfsuite.worker.preload import import_extras

    names = ["bitsandbytes", "peft", TRAINER_MODULE, "transformers.optimization", "deepspeed", "lion_pytorch", ""]
    assert import_extras(names, gpu=True) == ["lion_pytorch"]
    assert set(import_extras(names, gpu=False)) == set(names) - {""}
    assert {"bitsandbytes", "peft", "transformers.optimization", TRAINER_MODULE, "deepspeed"} <= CUDA_AT_IMPORT
    assert import_extras(["no_such_package_here"], gpu=False) == []  # the case skips itself


def test_the_forkserver_asks_cuda_nothing() -> None:
    """torch.cuda.is_available() initialises CUDA in the process that calls it, and a worker forked
    from a forkserver that did cannot use CUDA: whether torch is a CUDA build decides, which asks
    the driver nothing."""
    import inspect

    from perfsuite.worker import device, preload

    for source, asks in (
        (inspect.getsource(preload), "device.cuda_built()"),
        (inspect.getsource(device.cuda_built), "is_built()"),
    ):
        code = [line.split("#", 1)[0] for line in source.splitlines()]
        assert any(asks in line for line in code)
        assert not any("torch.cuda." in line for line in code)


@pytest.fixture
def fresh_forkserver(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from perfsuite.worker.process import renew_forkserver

    for name in (ENV, CPU_ADAM_ENV):  # none preloaded; restored after, whatever the test sets
        monkeypatch.setenv(name, "")
    renew_forkserver()
    yield
    renew_forkserver()  # the next test's workers get a forkserver of the environment they set


@pytest.mark.cpu
@pytest.mark.usefixtures("fresh_forkserver")
def test_a_worker_starts_with_what_its_session_preloaded_from_a_forkserver_booted_ahead() -> None:
    """A worker has imported what the session named, no more. ``perfsuite ab`` boots both sides'
    forkservers before a round, so that no run shares the machine with an import: the boot must be
    over when start_forkserver returns, and the next worker must fork from that forkserver at once.
    An offload case's CPU Adam is loaded there too (built first on a machine that has not), so that no
    worker compiles it beside another's timed steps.
    The forkserver's objects are frozen, and the memory profile's search finds the same tensors."""
    import multiprocessing.forkserver

    from perfsuite.worker.process import renew_forkserver, run_in_worker, start_forkserver

    spec = _spec("zero2_offload")
    plain = run_in_worker(spec, timeout_s=120, target=fault_cases.imported_at_start)
    assert plain["imported"] == ["transformers.models.bert.modeling_bert"]  # every registered class, resolved
    assert preload_for([spec, _spec("adamw_8bit"), _spec("vanilla", "trainer")]) == (
        "bitsandbytes",
        "deepspeed",
        TRAINER_MODULE,
    )
    renew_forkserver()
    boot_s = start_forkserver()
    server = multiprocessing.forkserver._forkserver._forkserver_pid  # type: ignore[attr-defined]
    assert server is not None
    assert boot_s > 0.5  # torch and transformers imported, not merely a process spawned
    preloaded = run_in_worker(spec, timeout_s=120, target=fault_cases.imported_at_start)
    assert multiprocessing.forkserver._forkserver._forkserver_pid == server  # type: ignore[attr-defined]
    assert preloaded["worker_startup_s"] < boot_s / 4, (preloaded["worker_startup_s"], boot_s)
    assert start_forkserver() < boot_s / 4  # already running: nothing to import
    # The Trainer engine's module brings transformers.trainer with it (and its peft integration).
    assert preloaded["imported"] == [
        "bitsandbytes",
        "deepspeed",
        "peft",
        "transformers.models.bert.modeling_bert",  # tiny-bert's class, resolved once
        "transformers.trainer",
    ]
    assert not plain["cpu_info_known"]
    assert not plain["ops_probed"]
    assert plain["ops_loaded"] == []
    # What DeepSpeed asks about the machine was asked in the forkserver, once for every worker, and
    # the offload case's CPU Adam loaded there.
    assert preloaded["cpu_info_known"]
    assert preloaded["ops_probed"]
    assert preloaded["ops_loaded"] == ["cpu_adam"]
    assert "Setting accelerator to CPU" in preloaded["output"]  # DeepSpeed's import log: the case's, not the terminal's
    # What the forkserver made is frozen: a worker's search for live tensors lists only its own
    # objects and finds what it finds with every object listed, the preloaded bitsandbytes
    # tables included.
    walk = run_in_worker(spec, timeout_s=120, target=fault_cases.live_tensors)
    assert walk["status"] == "ok", walk["error"]
    assert walk["forkserver_tensors"] >= 2
    assert walk["listed"] < walk["all"] / 100
    assert walk["frozen_walk"] == walk["full_walk"]


def test_a_session_of_a_projects_own_models_leaves_transformers_model_classes_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A forkserver boot resolves transformers' model classes (half of it on 2 cores) only where a case
    of the session builds a transformers model: a project's own models (a factory) need none, and a
    refresh boots a forkserver per repeat."""
    import dataclasses
    import os
    from typing import Any, cast

    from perfsuite.worker.process import renew_forkserver, run_in_worker

    @dataclasses.dataclass
    class Own:  # a case of a project's own model, as preload_for reads it
        strategy_spec: Any = dataclasses.field(default_factory=lambda: _spec("vanilla").strategy_spec)
        engine: str = "acme_step"
        model_spec: Any = dataclasses.field(default_factory=lambda: type("M", (), {"factory": "acme.models:build"}))

    monkeypatch.setenv(MODEL_CLASSES_ENV, "")
    preload_for(cast("list[CaseSpec]", [Own()]))
    assert os.environ[MODEL_CLASSES_ENV] == "0"
    preload_for(cast("list[CaseSpec]", [Own(), _spec("vanilla")]))
    assert os.environ[MODEL_CLASSES_ENV] == "1"
    monkeypatch.setenv(MODEL_CLASSES_ENV, "0")
    renew_forkserver()
    try:
        started = run_in_worker(_spec("vanilla"), timeout_s=120, target=fault_cases.imported_at_start)
    finally:
        monkeypatch.undo()
        renew_forkserver()
    assert started["status"] == "ok"
    assert "transformers.models.bert.modeling_bert" not in started["imported"]


@pytest.mark.nightly
def test_the_cuda_import_probe_names_what_an_import_asks_of_cuda(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """benchmarks/gpu/cuda_imports.py, the check behind a GPU forkserver's preloads: a module that asks
    torch for the GPUs at import is reported with the calls it made, one that does not with none."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "cuda_imports", Path(__file__).parents[1] / "benchmarks/gpu/cuda_imports.py"
    )
    assert spec is not None
    assert spec.loader is not None
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    (tmp_path / "asks_cuda.py").write_text("import torch\ntorch.cuda.device_count()\n")
    (tmp_path / "asks_nothing.py").write_text("import torch\n")
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    asks = probe.probe("asks_cuda", nvml_check=True, child=False)
    assert asks["error"] is None
    assert "device_count" in asks["torch_calls"]
    assert not asks["initialized"]
    assert probe.probe("asks_nothing", nvml_check=True, child=False)["torch_calls"] == []
    assert "no_such_module" in str(probe.probe("no_such_module", nvml_check=True, child=False)["error"])
    assert {"driver_sought", "nvml_sought", "driver_mapped_before", "nvml_mapped_before"} <= set(asks)
    (tmp_path / "exits.py").write_text("import os, sys\nsys.stderr.write('gone for good\\n')\nos._exit(7)\n")
    exited = str(probe.probe("exits", nvml_check=False, child=False)["error"])
    assert exited.startswith("the probe exited 7:")
    assert "gone for good" in exited
    assert "library" not in exited  # what it said, not the loader's search


def test_under_the_nvml_check_a_gpu_forkserver_imports_each_cuda_asking_module_whose_import_starts_no_cuda(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With PERFSUITE_PRELOAD_NVML=1 a CUDA build's forkserver tries the modules it would leave to
    the workers, under torch's NVML check: each first in a child forked from it, and only those
    whose import started no CUDA there in the forkserver itself; the variable is gone again for the
    workers."""
    from perfsuite.worker import device, preload

    _modules(tmp_path, monkeypatch, "asks_cuda", "starts_cuda", "ends_the_process", "after_it")
    monkeypatch.setattr(device, "cuda_started", lambda driver_before: FLAG if "starts_cuda" in sys.modules else None)
    names = ["asks_cuda", "starts_cuda", "ends_the_process", "after_it", "lion_pytorch"]

    assert preload.import_extras(names, gpu=True) == ["lion_pytorch"]
    assert "asks_cuda" not in sys.modules  # left to the workers, as without the check
    assert preload.import_extras(names, gpu=True, nvml=True) == ["lion_pytorch", "asks_cuda", "after_it"]
    assert sys.modules["asks_cuda"].SEEN == "1"
    assert "starts_cuda" not in sys.modules  # only its child imported it
    assert preload.CUDA_STARTED is None
    assert capsys.readouterr().out.splitlines() == [
        f"perfsuite: starts_cuda left to each worker: imported in a child of the forkserver, {FLAG}",
        "perfsuite: ends_the_process left to each worker: imported in a child of the forkserver, "
        "it ended the child with status 3",
    ]
    assert "PYTORCH_NVML_BASED_CUDA_CHECK" not in os.environ


def test_a_module_whose_import_starts_cuda_in_the_forkserver_alone_stops_its_preloads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the child's import started nothing and the forkserver's did all the same, the forkserver
    imports no more and says which (its GPU cases then fail naming it)."""
    from perfsuite.worker import device, preload

    _modules(tmp_path, monkeypatch, "starts_late", "after_it")
    here = os.getpid()
    started = lambda driver_before: FLAG if "starts_late" in sys.modules and os.getpid() == here else None  # noqa: E731
    monkeypatch.setattr(device, "cuda_started", started)
    assert preload.import_extras(["starts_late", "after_it"], gpu=True, nvml=True) == ["starts_late"]
    assert "after_it" not in sys.modules
    assert preload.CUDA_STARTED == f"importing starts_late: {FLAG}"


FLAG = "torch.cuda.is_initialized() is true"


def _modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """Importable modules ``names`` that the preloads take for ones whose import asks CUDA about the GPUs
    (``asks_cuda`` keeps the NVML check's variable as its import saw it; ``ends_the_process`` ends it)."""
    from perfsuite.worker import preload

    for name in names:
        body = {
            "asks_cuda": "import os; SEEN = os.environ.get('PYTORCH_NVML_BASED_CUDA_CHECK')",
            "ends_the_process": "import os; os._exit(3)",  # a crash in a library's native code, say
            "hangs": "import time; time.sleep(60)",
            "prints": "import os; os.write(1, b'printed at import\\n')",
        }.get(name, "")
        (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(preload, "CUDA_AT_IMPORT", frozenset(names))
    monkeypatch.setattr(preload, "CUDA_STARTED", None)
    monkeypatch.delenv("PYTORCH_NVML_BASED_CUDA_CHECK", raising=False)
    for name in names:
        monkeypatch.delitem(sys.modules, name, raising=False)


def test_cuda_is_started_by_torchs_context_or_by_the_drivers_library_loaded_after_the_check_began(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch

    from perfsuite.worker import device

    assert device.driver_loaded() == (b"libcuda.so" in Path("/proc/self/maps").read_bytes())
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(device, "driver_loaded", lambda: False)
    assert device.cuda_started(driver_before=False) is None
    monkeypatch.setattr(device, "driver_loaded", lambda: True)
    assert device.cuda_started(driver_before=False) == "the CUDA driver (libcuda.so) is loaded"
    assert device.cuda_started(driver_before=True) is None  # loaded before: only torch's flag can tell
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert device.cuda_started(driver_before=True) == "torch.cuda.is_initialized() is true"


def test_a_probe_that_does_not_end_is_killed_and_its_module_left_to_the_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """A child whose import hangs would hang the forkserver's boot, and every case behind it: past
    the probes' deadline its module is left to the workers and the child killed. What a child
    prints is discarded; the forkserver's own import prints it once."""
    from perfsuite.worker import device, preload

    _modules(tmp_path, monkeypatch, "hangs", "prints")
    monkeypatch.setattr(device, "cuda_started", lambda driver_before: None)
    monkeypatch.setattr(preload, "PROBE_LIMIT_S", 3.0)
    before = _children()
    assert preload.import_extras(["hangs", "prints", "prints"], gpu=True, nvml=True) == ["prints"]  # one child each
    out = capfd.readouterr().out
    assert "perfsuite: hangs left to each worker: imported in a child of the forkserver, it did not end in 3 s" in out
    assert out.count("printed at import") == 1
    assert _children() <= before  # every probe ended and reaped: none running, no zombie


def test_a_probes_fork_adds_no_warning_to_the_cases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Python 3.12 warns of a fork in a process with threads (a forkserver with torch has them), and
    the forkserver's import warnings go with every case: the probes' forks leave none there."""
    from perfsuite.worker import device, preload

    _modules(tmp_path, monkeypatch, "asks_cuda")
    monkeypatch.setattr(device, "cuda_started", lambda driver_before: None)
    fork = os.fork

    def warning_fork() -> int:  # as Python 3.12's os.fork, which warns in the parent
        pid = fork()
        if pid:
            warnings.warn(
                f"This process (pid={os.getpid()}) is multi-threaded, use of fork() may lead to deadlocks in the "
                "child.",
                DeprecationWarning,
                stacklevel=2,
            )
        return pid

    monkeypatch.setattr(os, "fork", warning_fork)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert preload.import_extras(["asks_cuda"], gpu=True, nvml=True) == ["asks_cuda"]
    assert [str(w.message) for w in caught] == []


def _children() -> set[int]:
    """This process's children, as the kernel lists them (running or not yet reaped)."""
    return {int(pid) for task in Path("/proc/self/task").iterdir() for pid in (task / "children").read_text().split()}


@pytest.mark.usefixtures("fresh_forkserver")
def test_a_gpu_case_forked_from_a_forkserver_that_started_cuda_fails_saying_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker forked from a process that started CUDA cannot use it: its GPU case fails at once,
    naming the preload, instead of failing somewhere in the training with CUDA's own error. Its CPU
    cases run."""
    from perfsuite.worker.process import renew_forkserver, run_isolated

    monkeypatch.setenv(ENV, "starts_cuda_at_import")
    here = str(Path(fault_cases.__file__).parent)  # for the forkserver's own interpreter
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])))
    renew_forkserver()
    gpu = CaseSpec(model="bert-base-uncased", strategy="vanilla", device="cuda")
    record = run_isolated(gpu, timeout_s=60, target=fault_cases.ok)
    assert record.status == "failed"
    assert (record.error or "").startswith(
        "RuntimeError: this worker's forkserver started CUDA (importing starts_cuda_at_import: "
        "torch.cuda.is_initialized() is true) under PERFSUITE_PRELOAD_NVML=1, so no worker forked from it "
        "can use the GPU: unset PERFSUITE_PRELOAD_NVML"
    )
    assert run_isolated(_spec("vanilla"), timeout_s=60, target=fault_cases.ok).status == "ok"
