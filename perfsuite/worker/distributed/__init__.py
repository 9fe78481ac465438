"""Cases beyond one process, inside the case's worker: ranks launched through torch's elastic launcher,
their records aggregated into one.

- :mod:`~perfsuite.worker.distributed.launch`: a case's ranks, started from its worker with
  ``torch.distributed.launcher.api.elastic_launch`` (torchrun's Python API), rendezvous on
  127.0.0.1 at a free port, gloo on CPUs and NCCL on GPUs, short collective timeouts, and
  nothing left running when a rank crashes or hangs. The run hands it ``train``.
- :mod:`~perfsuite.worker.distributed.aggregate` (pure): one record from the ranks' records: step
  time is the slowest rank's per step, then the median over steps; peak memory per rank,
  their max (what decides an OOM) and sum; the loss as the global mean per step.
- :mod:`~perfsuite.worker.distributed.fsdp`: FSDP2 (``fully_shard``) on each transformer block.
- :mod:`~perfsuite.worker.distributed.evidence`: what a rank really held and did (process group,
  wrapper, DTensor shards, a digest of its parameters), for the claims.

The GPUs cases share are handed out by :mod:`perfsuite.worker.pool`, in the parent.
"""
