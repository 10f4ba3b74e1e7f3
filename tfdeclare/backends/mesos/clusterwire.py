"""How each task's cluster description reaches it: in its TaskInfo, or fetched at its start.

In band (the default, and every job while ``mesos.clusterServer`` is unset), a task's
``TF_CONFIG`` and legacy flags travel in its TaskInfo (environment, argv): with every address
of its job in each task, a job of n tasks costs the master, and every agent's checkpoint and
containerizer launch, bytes in n² (18.9 KB per task at 1,000 tasks). With
``mesos.clusterServer`` set, a job whose per-task description exceeds ``minBytes`` is delivered
out of band, as TFMesos did: its TaskInfos carry a fixed bootstrap (``bootstrap``), the URL
of the framework's cluster server (``clusterserver``) with the task's token, and the task's key
(never sent: the bootstrap checks with it that the answer is the framework's), O(1) bytes per
task, and each task fetches its description as it starts.

This module owns the choice (``delivery``: pure, per launch) and the rewriting of a launch
for fetching (``fetched``: pure), and ``ClusterWire``, which the backend asks to prepare each
batch of launches (registering fetched jobs' generations with its server, which it starts
when the backend subscribes: from then on the process acts as the framework) and to wait, at
close, for the tasks still to fetch theirs. The generations served (their secrets included:
never logged nor shown in a status) and the port bound are kept in
``<state-dir>/mesos/clusters.json`` (mode 0600, written atomically at each change): the next
framework process (the background controller after ``apply``, a restarted daemon) serves them
on the same port when it is free, so a task launched by one process fetches its cluster from
the next; a job purged is served no more. What stays in band: tasks outside the TF cluster
(TensorBoard) and roles that run their image's entrypoint (a bootstrap cannot wrap an
entrypoint it does not know). A task's identity (``configHash``) never depends
on the delivery: changing ``mesos.clusterServer`` restarts no task.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from tfdeclare.backends.mesos.bootstrap import FETCH_ENV, IDENTITY_ENV, bootstrap_argv, fetch_value
from tfdeclare.backends.mesos.clusterserver import ClusterServer, Fetched
from tfdeclare.backends.mesos.config import ClusterServerConfig
from tfdeclare.core.run.clusterdoc import generation, payload_bytes, with_tf_config
from tfdeclare.core.run.tasks import ClusterSource, TaskLaunch
from tfdeclare.files import read_regular, write_atomic

log = logging.getLogger("tfdeclare.mesos")

# Unset clusterServer: a job whose tasks each carry more than this is named in a warning.
LARGE_IN_BAND_BYTES = 16 * 1024
SAVED_MAX_BYTES = 64 << 20  # clusters.json: read as a regular file only, never through a link


class Delivery(StrEnum):
    """How a task gets its cluster description."""

    ENV = "env"  # in its TaskInfo: TF_CONFIG in the environment, legacy flags in argv
    FETCH = "fetch"  # the bootstrap fetches it from the framework's cluster server


def delivery(launch: TaskLaunch, settings: ClusterServerConfig | None, payload: int) -> Delivery:
    """``payload``: ``payload_bytes`` of the launch's cluster source."""
    if settings is None or launch.cluster is None or launch.entrypoint:
        return Delivery.ENV
    return Delivery.FETCH if payload > settings.min_bytes else Delivery.ENV


def task_url(base: str, token: str) -> str:
    """The URL one task fetches: ``base`` (``http://HOST:PORT``) and the task's token as the
    path (``clusterserver``: the token is base64url, nothing to quote)."""
    return f"{base}/{token}"


def fetched(launch: TaskLaunch, base: str, token: str, key: str) -> TaskLaunch:
    """``launch`` rewritten to fetch its cluster: the bootstrap of its job's style before the
    role's argv as written (placeholders not yet replaced), no TF_CONFIG, its key and URL (with
    its token) instead, followed by the values of ``TFDECLARE_JOB``, ``_ROLE``, ``_INDEX`` and
    ``_ATTEMPT`` (which the bootstrap sets back before anything else) instead of those four."""
    source = launch.cluster
    assert source is not None
    given = dict(launch.env)
    identity = tuple(given.get(name, "") for name in IDENTITY_ENV)
    if not all(value and value.split() == [value] for value in identity):
        identity = ()  # never so for a task in the cluster: each is set, without a space
    drop = {FETCH_ENV, *(("TF_CONFIG",) if with_tf_config(source.style) else ())}
    drop.update(IDENTITY_ENV if identity else ())
    env = [(k, v) for k, v in launch.env if k not in drop]
    env.append((FETCH_ENV, fetch_value(key, task_url(base, token), identity)))
    argv = bootstrap_argv(source.style, source.argv[launch.key.role])
    return replace(launch, argv=argv, env=tuple(sorted(env)))


def fetches(launch: TaskLaunch) -> bool:
    """Does ``launch`` (as prepared) fetch its cluster at its start?"""
    return any(name == FETCH_ENV for name, _ in launch.env)


class ClusterWire:
    """Prepares launches for their delivery; owns the cluster server once one is needed."""

    def __init__(
        self,
        settings: ClusterServerConfig | None,
        folder: Path | None = None,
        told: Callable[[Fetched], None] | None = None,
    ) -> None:
        self.settings = settings
        self.told = told  # the backend loop's inbox (``ClusterServer.told``)
        self.server: ClusterServer | None = None
        self.saved_at = folder / "clusters.json" if folder is not None else None
        self._warned: set[str] = set()

    def start(self) -> None:
        """Start the server when configured (the backend subscribed). Raises ``OSError``
        when it cannot listen."""
        if self.settings is not None:
            self._server()

    def prepare(self, tasks: Sequence[TaskLaunch]) -> list[TaskLaunch]:
        """``tasks`` as they are launched: each fetched job's registered with the server (a
        new generation, and secret, when its addresses or attempt changed). The server was
        started when the backend subscribed (``start``)."""
        payloads: dict[int, int] = {}  # id(source) -> its payload: one source per launch batch
        out: list[TaskLaunch] = []
        groups: dict[int, tuple[ClusterSource, list[TaskLaunch]]] = {}
        for task in tasks:
            source = task.cluster
            if source is not None and id(source) not in payloads:
                payloads[id(source)] = payload_bytes(source)
                self._warn_large(task, payloads[id(source)])
            how = delivery(task, self.settings, payloads.get(id(source), 0))
            if how is Delivery.FETCH and source is not None:
                groups.setdefault(id(source), (source, []))[1].append(task)
        given: dict[str, tuple[str, str]] = {}  # task id -> its token and key
        for source, group in groups.values():
            first = group[0]
            server = self._server()
            credentials = server.register(
                first.job,
                generation(first.job, first.attempt, source),
                source,
                [(t.task_id, t.key) for t in group],
            )
            for task in group:
                given[task.task_id] = credentials[task.key.name]
        if groups:
            self._save()
        for task in tasks:
            credential = given.get(task.task_id)
            if credential is None or self.server is None:
                out.append(task)
            else:
                out.append(fetched(task, self.server.base_url, *credential))
        return out

    def forget(self, job: str) -> None:
        """``job`` is gone: stop serving it."""
        if self.server is not None:
            self.server.forget(job)
            self._save()

    def _server(self) -> ClusterServer:
        if self.server is None:
            assert self.settings is not None
            before = self._load()
            server = ClusterServer(self.settings, told=self.told)
            port = before.get("port")
            server.start(port if isinstance(port, int) else None)
            self.server = server
            try:
                server.restore(before.get("generations") or [])
            except (ValueError, KeyError, TypeError) as err:
                log.warning("ignoring %s (%s): tasks yet to fetch from it cannot", self.saved_at, err)
            log.info("serving job clusters at %s (mesos.clusterServer)", server.base_url)
        return self.server

    def _load(self) -> dict[str, Any]:
        if self.saved_at is None:
            return {}
        try:
            loaded = json.loads(read_regular(self.saved_at, SAVED_MAX_BYTES))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as err:
            log.warning("cannot read %s (%s): tasks yet to fetch from it cannot", self.saved_at, err)
            return {}
        return loaded if isinstance(loaded, dict) else {}

    def _save(self) -> None:
        if self.saved_at is None or self.server is None:
            return
        try:
            write_atomic(self.saved_at, json.dumps(self.server.saved()).encode(), mode=0o600)
        except OSError as err:
            log.warning(
                "cannot write %s (%s): a restarted framework process cannot serve them", self.saved_at, err
            )

    def _warn_large(self, task: TaskLaunch, payload: int) -> None:
        if self.settings is None and payload > LARGE_IN_BAND_BYTES and task.job not in self._warned:
            self._warned.add(task.job)
            log.warning(
                "%s: each task's TaskInfo carries %d bytes of its job's addresses (TF_CONFIG, legacy "
                "flags), squared over the job through the master and every agent's checkpoint; set "
                "mesos.clusterServer to deliver them out of band",
                task.job,
                payload,
            )

    def close(self, ended: Callable[[set[str]], set[str]]) -> set[str]:
        """Wait (at most ``fetchWaitSeconds``) for every launched task to fetch its cluster or
        end (``ended``: which of some task ids have), then stop the server. The task ids that
        never fetched theirs (each exits with the bootstrap's failure once its tries end)."""
        if self.server is None:
            return set()
        assert self.settings is not None
        try:
            left = self.server.wait_fetched(self.settings.fetch_wait_s, ended)
        finally:
            self.server.close()
        if left:
            log.warning(
                "closing the cluster server before %d task(s) fetched their cluster: %s",
                len(left),
                ", ".join(sorted(left)[:5]) + (" ..." if len(left) > 5 else ""),
            )
        return left
