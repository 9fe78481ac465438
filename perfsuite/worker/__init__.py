"""The worker side: what runs in a case's own process. Torch lives here.

Read :mod:`~perfsuite.worker.process` first (a case in its own worker, killed on a timeout), then
:mod:`~perfsuite.worker.run` (one case end to end: build, warm up, time, instrument, record) and
:mod:`~perfsuite.worker.engines` (the loop and the HF Trainer). Nothing here imports the top layer
(CLI, plugin, session); the pure core is below it.
"""
