"""Small values the spec model and the task types share: a task's slot, placement constraints,
volumes. Kept apart from ``tasks`` so loading a spec does not import the backend-facing types."""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter

from tfdeclare.core.enums import ConstraintOperator, Role, VolumeMode


@dataclass(frozen=True, slots=True, order=True)
class TaskKey:
    """One position in a job's cluster, e.g. ``worker-1``."""

    role: Role
    index: int

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"  # a StrEnum formats as its value

    @classmethod
    def parse(cls, text: str) -> TaskKey:
        """A task as users name it: ``worker-1`` (the name every output shows), ``worker:1``
        (an alias, the form of earlier releases) or a bare role for its task 0 (``chief``).
        Raises ``ValueError`` saying what is accepted."""
        role, sep, index = text.rpartition("-") if "-" in text else text.rpartition(":")
        if not sep:
            role, index = text, "0"
        if role in _ROLES and index.isascii() and index.isdigit():
            return cls(Role(role), int(index))
        raise ValueError(
            f"a task is ROLE-INDEX, e.g. worker-1 (or worker:1), with ROLE one of "
            f"{', '.join(sorted(_ROLES))} (got {text!r})"
        )


_ROLES = frozenset(r.value for r in Role)

ORDER = attrgetter("role", "index")
"""A sort key giving ``TaskKey``'s own order, compared in C: sorting the 10,000 slots of a big
job by it takes a few ms, by the dataclass's comparisons (a Python call each) about 40 ms."""


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
