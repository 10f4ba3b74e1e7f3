"""The reconciler daemon: GitOps from a folder or a git repository.

Watchers (file events, git fetches, ``POST /sync``, backend task changes, the resync timer)
only ask for a pass; ``service.Daemon`` runs one pass at a time: read the desired state from
the source, plan, apply, reconcile, write status (and, in git mode, commit the status files
to their own branch). ``server`` serves /healthz, /metrics and /jobs on 127.0.0.1.
"""
