"""Kubernetes resource quantities (``2500m``, ``4Gi``, ``1G``, ``1e3``) as numbers: cores, and
memory in whole MiB. Unlike our own ``mem`` (where ``G`` means GiB, as Mesos counts), ``G`` is
10^9 bytes here, as Kubernetes counts: a Kubeflow manifest means what it meant there. The
suffixes are Kubernetes' own: decimal ``n u m k M G T P E`` and binary ``Ki Mi Gi Ti Pi Ei``.
CPU is counted in millicores, rounded up as Kubernetes does (``999u`` and ``0.0005`` are
``1m``, ``1.0005`` is ``1001m``), GPUs are whole."""

from __future__ import annotations

import math
import re
from typing import Any

_QUANTITY = re.compile(
    r"^([+]?[0-9]+(?:\.[0-9]*)?|[+]?\.[0-9]+)(?:[eE]([+-]?[0-9]+))?(n|u|m|k|Ki|Mi|Gi|Ti|Pi|Ei|M|G|T|P|E)?$"
)
_SUFFIX = {
    None: 1.0,
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}


def parse_quantity(value: Any) -> float | None:
    """A Kubernetes resource quantity (``2500m``, ``4Gi``, ``1G``, ``1e3``, ``2``) as a number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number = float(value)
    else:
        match = _QUANTITY.match(str(value).strip())
        if match is None:
            return None
        number = float(match.group(1)) * 10.0 ** int(match.group(2) or 0) * _SUFFIX[match.group(3)]
    return number if math.isfinite(number) and number > 0 else None


def parse_cpu(value: Any) -> int | float | None:
    """Cores, rounded up to the millicore as Kubernetes rounds a cpu quantity (so any positive
    quantity is at least ``1m``); not a positive quantity: None."""
    cores = parse_quantity(value)
    if cores is None:
        return None
    # round(.., 6) first: 0.1 * 1000 is 100.00000000000001 in floating point, not 101m
    cores = math.ceil(round(cores * 1000, 6)) / 1000
    return int(cores) if cores.is_integer() else cores


def parse_gpus(value: Any) -> int | None:
    """Whole GPUs (``0``, ``1``, ``"2"``); a fraction or anything else: None."""
    if not isinstance(value, bool) and str(value).strip() in ("0", "0.0"):
        return 0
    count = parse_quantity(value)
    return int(count) if count is not None and count.is_integer() else None


def parse_memory_mib(value: Any) -> int | None:
    """Bytes as Kubernetes writes them -> whole MiB, rounded up."""
    size = parse_quantity(value)
    return None if size is None else max(1, math.ceil(size / 2**20 - 1e-9))
