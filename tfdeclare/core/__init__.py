"""The pure core: no I/O, no threads, no clocks. Grouped by domain:

- ``spec``: the spec language — YAML documents with positions, scalars, the JSON Schemas,
  quantities, the typed job model and its fingerprint, loading one file into jobs.
- ``run``: one job's run — the controller's job record, the TF cluster description of each
  task, the launches of a placement, the lifecycle step (restarts, backoff, completion) and the
  status document; the task types that cross the backend boundary.
- ``plan``: desired state (all files together), observed state (from job records), the planner
  and its renderings.

Shared by all three: ``enums`` (the closed vocabularies), ``diagnostics`` (file:line errors) and
``config`` (the config file). Within the core, ``plan`` may import ``run`` and ``spec``, ``run``
may import ``spec``, and ``spec`` neither (import-linter contract in ``pyproject.toml``).
"""
