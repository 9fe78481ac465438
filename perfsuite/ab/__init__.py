"""``perfsuite ab`` and ``perfsuite bisect``: two environments compared side by side on this machine.

- :mod:`perfsuite.ab.envs`: what a side is (an interpreter, a virtual environment, or pins
  laid over this environment as a cached overlay);
- :mod:`perfsuite.ab.pins`: the exact pins two commits differ in, as the two sides (``--pins``);
- :mod:`perfsuite.ab.sides`: a side's long-lived server (:mod:`perfsuite.worker.serve`);
- :mod:`perfsuite.ab.rounds`: one case in alternating pairs, with the paired verdict
  (:mod:`perfsuite.core.paired`) and memory and loss through the suite's gates;
- :mod:`perfsuite.ab.lanes`: several cases at once (``--jobs``), each lane a server per side
  on cores or a GPU of its own;
- :mod:`perfsuite.ab.comparison`: a whole comparison, from set-up to exit code;
- :mod:`perfsuite.ab.bisect`: the search for the first release between two that changes a case;
- :mod:`perfsuite.ab.bisecting`: its driver, each point searched compared with the good end.
"""
