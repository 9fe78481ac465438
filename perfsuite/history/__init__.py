"""Nightly results kept and judged over time.

:mod:`perfsuite.history.judge` decides what a series of nights says. Pure: no torch,
no pytest.
"""
