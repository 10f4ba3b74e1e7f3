"""The controller: applies plans to job records and runs reconcile passes against a backend.

``Controller.apply`` writes a plan's decisions into the job records (nothing runs then);
``Controller.reconcile`` is one level-triggered pass: observe every task, step every job's
lifecycle, act (stop, place, launch), save records, write status files. ``apply``, ``status``
and the daemon all drive the same two calls.
"""

from tfdeclare.controller.reconciler import Controller, PassResult

__all__ = ["Controller", "PassResult"]
