"""How a case trains, one engine per module, behind :mod:`~perfsuite.worker.engines.interface`
(the public engine interface, version 1, which a project's own engine implements too). Every engine
is built as ``Class(case)``: perfsuite's own from :class:`~perfsuite.worker.engines.common.OwnCase`,
named in :data:`perfsuite.core.engines.OWN_ENGINES`; a project's from an ``EngineCase``.

- :mod:`~perfsuite.worker.engines.loop`: perfsuite's explicit loop on accelerate (read this first).
- :mod:`~perfsuite.worker.engines.driven`: any engine as the run and the instruments drive it.
- :mod:`~perfsuite.worker.engines.hf_trainer`: the Hugging Face ``Trainer``, driven one step at a time.
- :mod:`~perfsuite.worker.engines.deepspeed`: DeepSpeed's configuration, setup and state, for both.
- :mod:`~perfsuite.worker.engines.common`: what both are built from and share (checkpointing, evidence).
"""
