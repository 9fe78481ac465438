"""The pure core: what a case, a strategy, a model and the matrix are; what a case's run recorded;
baselines, tolerances and the gates; statistics, the session's drift, hardware classes and shards. No
torch, no pytest: everything here is unit-tested alone (tests/test_layers.py imports it with both blocked).

Read :mod:`~perfsuite.core.spec` first (a case), then :mod:`~perfsuite.core.matrix` (which cases
run where), :mod:`~perfsuite.core.record` (what a run of one comes back as) and
:mod:`~perfsuite.core.gates` (how one is gated).
"""
