"""Imported first by the worker forkserver, before :mod:`perfsuite.worker.preload`: from here on the
forkserver ignores SIGINT.

A terminal's Ctrl-C reaches the whole foreground process group, the forkserver too.
multiprocessing's forkserver ignores SIGINT once it serves, but not while it imports torch and
friends (seconds), where a KeyboardInterrupt would print its traceback under the run's output.
The run itself stops the forkserver; each worker takes SIGINT's default back
(:func:`perfsuite.worker.process.run_isolated`).
"""

from __future__ import annotations

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)
