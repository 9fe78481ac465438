"""Nightly results kept and judged over time (issue: pictures and history).

:mod:`perfsuite.history.judge` decides what a series of nights says. Pure: no torch,
no pytest.
"""
