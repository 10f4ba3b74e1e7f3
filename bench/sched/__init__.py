"""``make bench-sched``: scheduling quality, measured in a seeded discrete-event simulation.

Modules: ``trace`` (synthetic GPU-cluster traces shaped like published ones), ``cluster``
(agents, what they offer, what runs where), ``policies`` (``tfdeclare``: the Mesos backend's
own queue and placement, ``tfdeclare.backends.mesos.queueing.place_in_line``; ``greedy`` and
``fifo``: the baselines), ``sim`` (the event loop in virtual time and the metrics), ``report``
(``bench/out/sched.json``, the plots, the table) and ``decision`` (decision time at 1,000
agents and 1,000 waiting jobs). See docs/benchmarks.md (Scheduling) for the method and results.
"""
