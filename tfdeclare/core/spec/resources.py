"""Resource quantities: the ``Resources`` value and parsing of ``mem``/``cpus``/``gpus``.

``mem`` is integer MiB or a string with a binary (``Ki Mi Gi Ti``) or, as Kubernetes users
write it, a bare ``K M G T`` suffix; both mean powers of 1024 here, the way Mesos counts MB.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

from tfdeclare.core.diagnostics import JsonPath

_MEM = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*(Ki|Mi|Gi|Ti|K|M|G|T)?$")
_FACTOR_TO_MIB = {
    None: 1.0,
    "Ki": 1 / 1024,
    "K": 1 / 1024,
    "Mi": 1.0,
    "M": 1.0,
    "Gi": 1024.0,
    "G": 1024.0,
    "Ti": 1024.0 * 1024.0,
    "T": 1024.0 * 1024.0,
}
# One EiB; anything larger is a typo, and it keeps the arithmetic exact in floats.
MAX_MEM_MIB = 1 << 40


class QuantityError(ValueError):
    """A quantity that the schema's pattern let through but that has no sensible value;
    ``path`` says where it stands in its document, where the caller knows."""

    def __init__(self, message: str, path: JsonPath = ()) -> None:
        super().__init__(message)
        self.path = path


@lru_cache(maxsize=1024, typed=True)  # a few spellings recur in every file (typed: True is not 1)
def parse_mem_mib(value: int | float | str) -> int:
    """``8192`` -> 8192, ``"16Gi"`` -> 16384, ``"512Ki"`` -> 1 (rounded up to whole MiB)."""
    if isinstance(value, bool):
        raise QuantityError("mem must be a number of MiB or a string such as 16Gi")
    if isinstance(value, int | float):
        mib = float(value)
    else:
        match = _MEM.match(value.strip())
        if match is None:
            raise QuantityError(f"mem {value!r} is not a quantity such as 8192, 512Mi or 16Gi")
        mib = float(match.group(1)) * _FACTOR_TO_MIB[match.group(2)]
    if not math.isfinite(mib) or mib <= 0:
        raise QuantityError(f"mem {value!r} must be more than 0")
    if mib > MAX_MEM_MIB:
        raise QuantityError(f"mem {value!r} is larger than 1 EiB")
    return max(1, math.ceil(mib - 1e-9))


@dataclass(frozen=True, slots=True)
class Resources:
    """What one task needs: cores (fractional), memory in MiB, whole GPUs."""

    cpus: float
    mem_mib: int
    gpus: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            round(self.cpus + other.cpus, 3), self.mem_mib + other.mem_mib, self.gpus + other.gpus
        )

    def __sub__(self, other: Resources) -> Resources:
        return Resources(
            round(self.cpus - other.cpus, 3), self.mem_mib - other.mem_mib, self.gpus - other.gpus
        )

    def fits_in(self, available: Resources) -> bool:
        return (
            self.cpus <= available.cpus + 1e-9
            and self.mem_mib <= available.mem_mib
            and self.gpus <= available.gpus
        )

    def scaled(self, n: int) -> Resources:
        return Resources(round(self.cpus * n, 3), self.mem_mib * n, self.gpus * n)

    def describe(self) -> str:
        text = f"cpus {self.cpus:g}, mem {self.mem_mib} MiB"
        return f"{text}, gpus {self.gpus}" if self.gpus else text


ZERO = Resources(0.0, 0, 0)
