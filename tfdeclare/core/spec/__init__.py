"""The spec language: YAML bytes to typed, validated job specs, every problem with its file,
line, column and JSON path. ``documents`` (safe YAML with positions), ``scalars`` (YAML 1.2
core-schema scalars), ``schema`` (the JSON Schemas of ``schemas/``: errors and defaults),
``resources`` (quantities such as ``16Gi``), ``keys`` and ``names`` (small shared values),
``model`` (frozen typed specs, the canonical form and its fingerprint), ``loader`` (one file to
its jobs and diagnostics)."""
