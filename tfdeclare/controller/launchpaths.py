"""The host paths of a task, resolved and checked again at the moment it is launched.

A spec is checked when it is validated, planned and applied; the folders it names may change
after that (in folder mode the spec folder is writable: ``workingDir: sub`` swapped for a link
to ``/etc``). So every launch (the first, a restart after a failure, a resize, TensorBoard's)
resolves the task's source folder (``workingDir`` relative to its spec's folder, or that
folder) with its links as they are *now*, applies the same source-folder rule as the policy
(``core/spec/policy.py``: inside the folder the spec was read from, as recorded when it was
applied; not in the state or status folder or an engine socket), and hands the backend the
resolved folder (``TaskLaunch.source_folder``), which is what it links and mounts: nothing
resolves ``sub`` again after the check. On a backend whose host paths are this machine's (the
local one), an absolute working folder of a process task and every volume's ``hostPath`` are
resolved and checked too (``allowedHostPaths`` and the reserved paths), and the volume is
mounted from its resolved path.

A refusal is ``LaunchRefused``, naming the task, the path and where it leads: the controller
puts it into the job's status (reason ``LaunchRefused``) and launches nothing of that batch.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from tfdeclare.core.run.tasks import TaskLaunch
from tfdeclare.core.spec.keys import Volume
from tfdeclare.core.spec.policy import lies_under, reserved_path_problem, source_folder_problem


class LaunchRefused(Exception):
    """A task's folder leads, links resolved now, somewhere its spec may not reach."""


@dataclass(frozen=True, slots=True)
class LaunchPaths:
    """What a launch is checked against: the controller's own paths (path -> what it is: the
    state and status folders, engine sockets) and the policy's ``allowedHostPaths`` (None: not
    configured here, volumes are then checked against the reserved paths only)."""

    reserved: Mapping[str, str] = field(default_factory=dict)
    allowed_host_paths: tuple[str, ...] | None = None
    resolve: Callable[[str], str] = os.path.realpath

    def checked_all(
        self, launches: Sequence[TaskLaunch], root: str | None, *, host_paths_here: bool
    ) -> list[TaskLaunch]:
        """``checked`` of each launch of one batch, each distinct path resolved once for the
        batch (its tasks are launched together, so they see the folders as they are now; a
        1,000-task job otherwise resolved its one folder and the reserved paths 1,000 times)."""
        memo: dict[str, str] = {}

        def resolve(path: str) -> str:
            found = memo.get(path)
            if found is None:
                found = memo[path] = self.resolve(path)
            return found

        once = replace(self, resolve=resolve)
        sources: dict[tuple[str, str | None], str] = {}  # the batch's source folders found allowed
        return [once.checked(t, root, host_paths_here=host_paths_here, sources=sources) for t in launches]

    def checked(
        self,
        launch: TaskLaunch,
        root: str | None,
        *,
        host_paths_here: bool,
        sources: dict[tuple[str, str | None], str] | None = None,
    ) -> TaskLaunch:
        """``launch`` with its source folder resolved and checked (and, when ``host_paths_here``,
        its volumes resolved); ``root`` is the folder its spec was read from when applied.
        ``sources``: (spec folder, workingDir) -> the folder already checked for this batch."""
        wd = launch.working_dir
        if launch.source_dir is not None and (wd is None or not posixpath.isabs(wd)):
            target = None if sources is None else sources.get((launch.source_dir, wd))
            if target is None:
                what = f"workingDir {wd}" if wd is not None else f"its spec's folder {launch.source_dir}"
                target = self.resolve(posixpath.normpath(posixpath.join(launch.source_dir, wd or ".")))
                bound = posixpath.normpath(root or launch.source_dir)
                problem = source_folder_problem(what, target, bound, self._reserved)
                if problem is not None:
                    raise LaunchRefused(f"{launch.key.name}: {problem}")
                if sources is not None:
                    sources[(launch.source_dir, wd)] = target
            launch = replace(launch, source_folder=target)
        if not host_paths_here:
            return launch
        if wd is not None and posixpath.isabs(wd) and launch.image is None:
            problem = reserved_path_problem(self.resolve(wd), self._reserved, mounted=False)
            if problem is not None:
                raise LaunchRefused(f"{launch.key.name}: workingDir {wd} (links resolved): {problem}")
        volumes = tuple(self._volume(launch, v) for v in launch.volumes)
        return replace(launch, volumes=volumes) if volumes != launch.volumes else launch

    def _volume(self, launch: TaskLaunch, volume: Volume) -> Volume:
        resolved = self.resolve(volume.host_path)
        problem = reserved_path_problem(resolved, self._reserved, mounted=True)
        if problem is None and self.allowed_host_paths is not None:
            allowed = [*self.allowed_host_paths, *map(self.resolve, self.allowed_host_paths)]
            if not any(lies_under(resolved, posixpath.normpath(a)) for a in allowed):
                problem = f"it leads to {resolved}, which policy.allowedHostPaths does not allow"
        if problem is not None:
            raise LaunchRefused(f"{launch.key.name}: volume {volume.host_path} (links resolved): {problem}")
        return replace(volume, host_path=resolved) if resolved != volume.host_path else volume

    @property
    def _reserved(self) -> dict[str, str]:
        """The reserved paths as given and with their links resolved (either may be reached)."""
        out = {posixpath.normpath(p): what for p, what in self.reserved.items()}
        out.update({self.resolve(p): what for p, what in self.reserved.items()})
        return out
