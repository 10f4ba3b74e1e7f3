"""A task's cluster description as a document fetched at its start (out-of-band delivery). Pure.

Delivered in band (the default), each task's ``TF_CONFIG`` and legacy flags carry every
address of its job, so the bytes of a job's launches grow with the square of its size. A
backend may instead hand each task a fixed bootstrap that fetches this module's document when
the task starts (``tfdeclare.backends.mesos.clusterserver``). This module owns:

- ``payload_bytes``: how many bytes of a task's launch its cluster description takes in band
  (what the choice between the two deliveries weighs);
- ``document`` (``Documents`` for the tasks of one generation): what a task of ``key`` is
  served, with exactly the values it gets in band (``clusterspec``'s rules: the evaluator is
  left out of the others' cluster; legacy flags know only ``ps`` and ``worker``):
  ``{"TF_CONFIG": ...}`` for ``tf_config``,
  ``{"ps_hosts": ..., "worker_hosts": ..., "job_name": ..., "task_index": ...}`` (the values
  of the argv's placeholders) for ``legacy_flags``, both for ``both``: only these names, the
  only ones the bootstrap applies;
- ``generation``: a digest naming the cluster a launch's tasks see (a new one when any
  address changes).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tfdeclare.core.enums import ClusterSpecStyle, Role
from tfdeclare.core.run.clusterspec import cluster_json, legacy_hosts, tf_config
from tfdeclare.core.run.tasks import ClusterSource, TaskKey

_PLACEHOLDERS = ("{ps_hosts}", "{worker_hosts}")


def with_tf_config(style: ClusterSpecStyle) -> bool:
    return style in (ClusterSpecStyle.TF_CONFIG, ClusterSpecStyle.BOTH)


def with_flags(style: ClusterSpecStyle) -> bool:
    return style in (ClusterSpecStyle.LEGACY_FLAGS, ClusterSpecStyle.BOTH)


def payload_bytes(source: ClusterSource) -> int:
    """The most bytes any task's in-band cluster description takes: its ``TF_CONFIG`` (the
    evaluator's, which is the largest) and the host lists its argv's placeholders expand to."""
    total = 0
    if with_tf_config(source.style):
        total += len(tf_config(cluster_json(source.addresses, Role.EVALUATOR), TaskKey(Role.EVALUATOR, 0)))
    if with_flags(source.style):
        hosts = legacy_hosts(source.addresses)
        sizes = {"{ps_hosts}": len(hosts["ps_hosts"]), "{worker_hosts}": len(hosts["worker_hosts"])}
        argvs = source.argv.values()
        expanded = (sum(a.count(p) * sizes[p] for a in argv for p in _PLACEHOLDERS) for argv in argvs)
        total += max(expanded, default=0)
    return total


def document(source: ClusterSource, key: TaskKey) -> dict[str, Any]:
    """What task ``key`` (a task of the cluster) is served."""
    return Documents(source).of(key)


class Documents:
    """The documents of one generation's tasks: each role's cluster and the legacy host lists
    made once, so serving each task its document costs O(job) time and no memory per task."""

    def __init__(self, source: ClusterSource) -> None:
        self.source = source
        self._clusters: dict[Role, str] = {}
        self._hosts: dict[str, str] | None = None

    def of(self, key: TaskKey) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if with_tf_config(self.source.style):
            cluster = self._clusters.get(key.role)
            if cluster is None:
                cluster = self._clusters[key.role] = cluster_json(self.source.addresses, key.role)
            out["TF_CONFIG"] = tf_config(cluster, key)
        if with_flags(self.source.style):
            if self._hosts is None:
                self._hosts = legacy_hosts(self.source.addresses)
            out.update(self._hosts, job_name=key.role.value, task_index=str(key.index))
        return out


def generation(job: str, attempt: int, source: ClusterSource) -> str:
    """A digest of the job, its attempt and every address its tasks see."""
    listed = sorted((k.name, a) for k, a in source.addresses.items())
    text = json.dumps([job, attempt, source.style.value, listed], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]
