"""perfsuite's test tiers, and which command runs which.

The pytest plugin (``perfsuite/plugin.py``, registered through the ``pytest11`` entry
point) registers the markers, builds the model × strategy matrix and gates it against
``baselines/``.

- ``pytest``: everything that runs on any machine: unit tests of the pure modules
  (strategies, stats, compare, baselines, tables, data, declarations, ``perfsuite
  init``), the report (``report.html`` of the every-push matrix replayed from its
  baselines, opened in headless Chromium) and the nightly history (records, verdicts,
  tracking issues), actionlint on every workflow, plugin tests through ``pytester``,
  worker isolation and CLI tests, a project outside perfsuite declaring its own models
  and recipe beside its own model factory and training step, end to end
  (``tests/test_own_project.py``), and the CPU tier (``-m cpu``): every
  tiny model × every strategy as real training runs, each gated on step time
  (calibrated, against this CPU class's figure), peak memory and its breakdown, and
  the loss curve against ``baselines/cpu/``; the same through the Hugging Face Trainer
  engine for tiny-bert's core strategies (ids ``-trainer``, marker ``trainer``); the
  claims every strategy makes against a vanilla control run in the same session;
  multi-rank cases (``-m distributed``, ids ``-ws2``: ranks launched through torch's
  elastic launcher, gloo at world size 2) with their claims, their silent fallbacks, a
  killed and a hung rank (``tests/test_distributed.py``); the GPU pool with a faked GPU
  count (``tests/test_pool.py``) and the matrix's shards (``tests/test_shards.py``).
- ``pytest -m nightly``: checks too long for every push (deselected by default through
  ``addopts``; the scheduled CI job runs them): the rest of the CPU matrix through both
  engines (``perfsuite.core.matrix.nightly_only``), their claims, regressions injected into
  real runs (``tests/test_injected_regressions.py``), each failing exactly its case, a
  team's own code changed three ways (``tests/test_own_code.py``),
  that the generated data is learnable (300 steps per tiny model), and the report of
  all 121 tiny-model cases with baselines.
- ``pytest -m gpu --benchmark-compare``: the full-size models on a CUDA GPU against
  ``baselines/<gpu>/`` and its pinned pytest-benchmark file, plus the GPU-only claims.
  Without a CUDA GPU it stops at once with a usage error (``--perfsuite-no-gpu=skip`` skips
  them instead).
- ``pytest -m "not cpu and not gpu"``: the unit and plugin tests alone.
- ``perfsuite baselines refresh [-k EXPR] [--repeats N]``: rewrite the selected
  baselines of this machine's tier (``pytest --perfsuite-refresh`` does the same).

Markers ``deepspeed`` and ``bnb`` skip a test when that optional package is missing,
naming the install that brings it.
"""

pytest_plugins = ["pytester"]
