"""Which of the modules a GPU forkserver leaves to its workers could it import after all?

A worker forked from a process that has initialised CUDA cannot use CUDA, so with a CUDA build of
torch the forkserver skips every module in ``perfsuite.core.preloads.CUDA_AT_IMPORT`` (bitsandbytes,
DeepSpeed, peft, galore, transformers' optimization module and Trainer): each GPU case imports them
itself, 3-11 s of its build. Many of them only ask whether CUDA is there, which torch can answer
through NVML without initialising CUDA (``PYTORCH_NVML_BASED_CUDA_CHECK=1``).

For each module, in a fresh process (the forkserver's base set imported first), this reports what
its import asked of CUDA:

- ``torch_calls``: the ``torch.cuda`` functions it called (``_lazy_init`` creates a context);
- ``driver_sought``: whether the dynamic loader looked for the CUDA driver (``libcuda.so.1``)
  during it, which is how a CUDA runtime starts (``cuInit``), torch's or a library's own; and
  ``nvml_sought``, the same for NVML (``libnvidia-ml.so.1``), which creates no context. The loader
  does not look for a library already loaded: ``driver_mapped_before`` and ``nvml_mapped_before``
  say whether the base set had loaded them, when these two cannot tell;
- ``initialized``: ``torch.cuda.is_initialized()`` after it;
- on a GPU, ``child_cuda``: whether a child forked after the import can still run a CUDA kernel,
  the question that decides.

    python benchmarks/gpu/cuda_imports.py --json cuda-imports.json          # every such module, NVML check on
    python benchmarks/gpu/cuda_imports.py --no-nvml-check                   # torch's default check, for comparison

On a machine without a GPU (a CUDA build of torch, no driver) ``child_cuda`` is not asked; the
loader's search is read the same way (``LD_DEBUG=libs``), found or not.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from typing import Any

PROBE = r"""
import ctypes, json, os, sys, multiprocessing as mp
import torch, transformers, accelerate  # the forkserver's base set (perfsuite.worker.preload)
import perfsuite.worker.measure, perfsuite.worker.run  # noqa: F401

calls = []
def watch(owner, name):
    original = getattr(owner, name, None)
    if original is None:
        return
    def logged(*args, **kwargs):
        calls.append(name)
        return original(*args, **kwargs)
    setattr(owner, name, logged)
for name in ("_lazy_init", "init", "is_available", "device_count", "get_device_capability",
             "get_device_properties", "get_device_name", "current_device", "mem_get_info", "get_arch_list"):
    watch(torch.cuda, name)
for name in ("_cuda_getDeviceCount", "_cuda_init"):
    watch(torch._C, name)

maps = open("/proc/self/maps").read()
mapped = {"driver_mapped_before": "libcuda.so" in maps, "nvml_mapped_before": "libnvidia-ml.so" in maps}
os.write(2, b"PROBE-START\n")
error = None
try:
    __import__(sys.argv[1])
except Exception as exc:
    error = f"{type(exc).__name__}: {exc}"[:200]
os.write(2, b"PROBE-END\n")
result = {"module": sys.argv[1], "error": error, "torch_calls": sorted(set(calls)),
          "initialized": torch.cuda.is_initialized(), **mapped}

def child(queue):
    try:
        queue.put(float((torch.ones(1, device="cuda") + 1).item()) == 2.0)
    except Exception as exc:
        queue.put(f"{type(exc).__name__}: {exc}"[:200])

if os.environ.get("PROBE_CHILD") == "1":
    queue = mp.get_context("fork").Queue()
    proc = mp.get_context("fork").Process(target=child, args=(queue,), daemon=True)
    proc.start()
    proc.join(120)
    if proc.is_alive():
        proc.kill()
        result["child_cuda"] = "hung: killed after 120 s"
    else:
        result["child_cuda"] = queue.get(timeout=5) if not queue.empty() else f"exit code {proc.exitcode}"
print("PROBE " + json.dumps(result))
"""


LOADER_LINE = re.compile(r"^\s*\d+:\s")
"""A line of the dynamic loader's own (``LD_DEBUG``): ``<pid>:<tab>...``."""


def modules() -> list[str]:
    """What a GPU forkserver leaves to its workers (:data:`perfsuite.core.preloads.CUDA_AT_IMPORT`)."""
    from perfsuite.core.preloads import CUDA_AT_IMPORT

    return sorted(CUDA_AT_IMPORT)


def probe(module: str, *, nvml_check: bool, child: bool) -> dict[str, Any]:
    env = {**os.environ, "PROBE_CHILD": "1" if child else "0", "LD_DEBUG": "libs"}
    for name in ("PYTORCH_NVML_BASED_CUDA_CHECK", "LD_DEBUG_OUTPUT"):  # the loader's search goes to stderr
        env.pop(name, None)
    if nvml_check:
        env["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    try:
        done = subprocess.run(
            [sys.executable, "-c", PROBE, module], env=env, capture_output=True, text=True, timeout=600
        )
    except subprocess.TimeoutExpired:
        return {"module": module, "error": "the probe timed out after 600 s"}
    during = done.stderr.partition("PROBE-START\n")[2].partition("PROBE-END\n")[0]
    for line in done.stdout.splitlines():
        if line.startswith("PROBE "):
            result = dict(json.loads(line[len("PROBE ") :]))
            result["driver_sought"] = "find library=libcuda.so" in during
            result["nvml_sought"] = "find library=libnvidia-ml.so" in during
            return result
    said = "\n".join(line for line in done.stderr.splitlines() if not LOADER_LINE.match(line))
    return {"module": module, "error": f"the probe exited {done.returncode}: {said.strip()[-300:]}"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-nvml-check", action="store_true", help="torch's default CUDA check (cudaGetDeviceCount)")
    parser.add_argument("--modules", help="comma-separated modules (default: every one a GPU forkserver leaves out)")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    import torch

    child = torch.cuda.is_available()
    results = []
    for module in args.modules.split(",") if args.modules else modules():
        result = probe(module, nvml_check=not args.no_nvml_check, child=child)
        results.append(result)
        print(json.dumps(result), flush=True)
        if args.json:
            with open(args.json, "w") as out:
                json.dump({"nvml_check": not args.no_nvml_check, "gpu": child, "results": results}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
