"""A preload that started CUDA, as one under PERFSUITE_PRELOAD_NVML may on a GPU: it sets what the
forkserver's check would have found (tests/test_preloads.py preloads it)."""

import sys

# The forkserver is still importing perfsuite.worker.preload, which imports this.
vars(sys.modules["perfsuite.worker.preload"])["CUDA_STARTED"] = (
    "importing starts_cuda_at_import: torch.cuda.is_initialized() is true"
)
