"""tfdeclare: declarative, GitOps-style runner for distributed TensorFlow training.

The package is layered (docs/architecture.md): ``core`` is pure (no I/O), ``backends`` and
``shell`` do the I/O, ``controller`` runs one reconcile pass, ``daemon`` repeats it, ``cli`` is
the command line. The layering is enforced by import-linter (``make layers``).
"""

__version__ = "0.1.0"
