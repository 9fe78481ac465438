"""A module whose import never ends, as an import or a build that hangs in the forkserver would
(tests/test_worker.py preloads it)."""

import time

time.sleep(3600)
