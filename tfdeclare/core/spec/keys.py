"""Small values the spec model and the task types share: a task's slot, placement constraints,
volumes. Kept apart from ``tasks`` so loading a spec does not import the backend-facing types."""

from __future__ import annotations

from dataclasses import dataclass

from tfdeclare.core.enums import ConstraintOperator, Role, VolumeMode


@dataclass(frozen=True, slots=True, order=True)
class TaskKey:
    """One position in a job's cluster, e.g. ``worker-1``."""

    role: Role
    index: int

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"  # a StrEnum formats as its value

    @property
    def colon_name(self) -> str:
        """The ``ROLE:INDEX`` form users type (``tfdeclare logs --task worker:1``)."""
        return f"{self.role}:{self.index}"


@dataclass(frozen=True, slots=True)
class AttributeConstraint:
    attribute: str
    operator: ConstraintOperator
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Volume:
    host_path: str
    container_path: str
    mode: VolumeMode = VolumeMode.RO
