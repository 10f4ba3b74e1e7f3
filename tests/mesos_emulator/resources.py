"""Resource arithmetic with Mesos semantics: scalars, ranges and sets.

Owns the ``Resources`` value type used by the allocator and by ACCEPT validation:

* scalars are fixed point with three decimals (Mesos ``convertToFixed``), kept as integer
  thousandths; a scalar that drops to zero disappears, as in Mesos;
* ranges are inclusive, sorted and coalesced; sets are frozensets;
* reservations: a resource reserved to a role is its own item, keyed ``name(role)`` (static,
  from the agent's ``--resources``/``--default_role``) or ``name(role,DYNAMIC)`` (a RESERVE
  operation), so the arithmetic keeps reserved and unreserved amounts apart as Mesos does;
  ``scalar(name)`` is the total of a name over all its reservations;
* ``contains`` / ``+`` / ``-`` follow ``Resources::contains`` and friends for non-revocable
  resources without disk info;
* ``str()`` matches Mesos' stringification (``cpus(allocated: *):4; ports(...):[1-2]``),
  because task validation messages embed it;
* JSON in the formats the master speaks: pre-reservation-refinement (``role``, and
  ``reservation`` for dynamic ones), post-refinement (the ``reservations`` stack), and
  both at once on operator endpoints;
* parsing of the agent flag format (``cpus:4;mem:8192;gpus(ml):1;ports(ml):[31000-31099]``)
  and of attribute strings (``rack:r1;gen:3``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from typing import Any

Ranges = tuple[tuple[int, int], ...]
ResourceValue = int | Ranges | frozenset[str]

DYNAMIC = "DYNAMIC"


def resource_key(name: str, role: str | None = None, dynamic: bool = False) -> str:
    """The item key of ``name`` reserved to ``role`` (None or ``*``: unreserved)."""
    if role is None or role == "*":
        return name
    return f"{name}({role},{DYNAMIC})" if dynamic else f"{name}({role})"


def split_key(key: str) -> tuple[str, str | None, bool]:
    """(name, reservation role or None, dynamic) of an item key."""
    name, sep, rest = key.partition("(")
    if not sep:
        return key, None, False
    role, _, kind = rest.rstrip(")").partition(",")
    return name, role, kind == DYNAMIC


def to_fixed(value: float) -> int:
    """Convert a double to thousandths, as Mesos' ``convertToFixed`` does."""
    return round(value * 1000)


def from_fixed(milli: int) -> float:
    return milli / 1000.0


def _fmt_scalar(milli: int) -> str:
    value = from_fixed(milli)
    return f"{value:g}" if abs(value) < 1e6 else str(value).removesuffix(".0")


def coalesce(ranges: Iterable[tuple[int, int]]) -> Ranges:
    merged: list[list[int]] = []
    for begin, end in sorted(ranges):
        if merged and begin <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([begin, end])
    return tuple((begin, end) for begin, end in merged)


def ranges_contain(outer: Ranges, inner: Ranges) -> bool:
    index = 0
    for begin, end in inner:
        while index < len(outer) and outer[index][1] < begin:
            index += 1
        if index >= len(outer) or outer[index][0] > begin or outer[index][1] < end:
            return False
    return True


def ranges_subtract(left: Ranges, right: Ranges) -> Ranges:
    out: list[tuple[int, int]] = []
    for begin, end in left:
        pieces = [(begin, end)]
        for r_begin, r_end in right:
            if r_end < begin or r_begin > end:
                continue
            next_pieces: list[tuple[int, int]] = []
            for p_begin, p_end in pieces:
                if r_end < p_begin or r_begin > p_end:
                    next_pieces.append((p_begin, p_end))
                    continue
                if p_begin < r_begin:
                    next_pieces.append((p_begin, r_begin - 1))
                if r_end < p_end:
                    next_pieces.append((r_end + 1, p_end))
            pieces = next_pieces
        out.extend(pieces)
    return coalesce(out)


def ranges_size(ranges: Ranges) -> int:
    return sum(end - begin + 1 for begin, end in ranges)


class Resources:
    """An ordered bag of unreserved resources: name -> scalar | ranges | set."""

    __slots__ = ("items",)

    def __init__(self, items: dict[str, ResourceValue] | None = None) -> None:
        self.items: dict[str, ResourceValue] = {}
        if items:
            for name, value in items.items():
                self._add_one(name, value)

    # -- construction ------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str, default_role: str = "*") -> Resources:
        """Parse the agent flag format ``cpus:4;mem(ml):8192;ports:[31000-31099];x:{a,b}``: a
        ``(role)`` reserves the resource to that role (static), ``default_role`` (the agent's
        ``--default_role``) the ones without."""
        out = cls()
        for part in filter(None, (p.strip() for p in text.split(";"))):
            name, sep, value = part.partition(":")
            name = name.strip()
            match = _NAME_RE.match(name)
            if not sep or match is None:
                raise ValueError(f"invalid resource {part!r} (expected name:value or name(role):value)")
            role = match.group(2) if match.group(2) is not None else default_role
            out._add_one(resource_key(match.group(1), role), parse_value(value.strip()))
        return out

    def for_role(self, role: str) -> Resources:
        """What a framework's role may be offered of these: unreserved, reserved to it, and
        reserved to one of its ancestors (``ml``'s reservations go to ``ml/team`` too), as
        upstream's ``Resources::isAllocatableTo`` (src/common/resources.cpp) decides: found
        different on the real master (issue 21), where this once matched roles exactly."""
        out = Resources()
        out.items = {
            k: v
            for k, v in self.items.items()
            if (reserved := split_key(k)[1]) in (None, role) or role.startswith(f"{reserved}/")
        }
        return out

    def copy(self) -> Resources:
        clone = Resources()
        clone.items = dict(self.items)
        return clone

    # -- queries -------------------------------------------------------------------------
    def __bool__(self) -> bool:
        return bool(self.items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Resources) and self.items == other.items

    __hash__ = None  # type: ignore[assignment]

    def __iter__(self) -> Iterator[tuple[str, ResourceValue]]:
        return iter(self.items.items())

    def scalar(self, name: str) -> float:
        """The total of ``name``, reserved or not."""
        return from_fixed(
            sum(v for k, v in self.items.items() if isinstance(v, int) and split_key(k)[0] == name)
        )

    def ranges(self, name: str) -> Ranges:
        """The ranges of ``name``, reserved or not."""
        return coalesce(
            r for k, v in self.items.items() if isinstance(v, tuple) and split_key(k)[0] == name for r in v
        )

    def contains(self, other: Resources) -> bool:
        for name, value in other.items.items():
            mine = self.items.get(name)
            if mine is None or type(mine) is not type(value):
                return False
            if isinstance(value, int):
                assert isinstance(mine, int)
                if mine < value:
                    return False
            elif isinstance(value, tuple):
                assert isinstance(mine, tuple)
                if not ranges_contain(mine, value):
                    return False
            else:
                assert isinstance(mine, frozenset)
                if not value <= mine:
                    return False
        return True

    # -- arithmetic ----------------------------------------------------------------------
    def _add_one(self, name: str, value: ResourceValue) -> None:
        mine = self.items.get(name)
        if mine is None:
            if _is_empty(value):
                return
            self.items[name] = value
            return
        if isinstance(mine, int) and isinstance(value, int):
            self.items[name] = mine + value
        elif isinstance(mine, tuple) and isinstance(value, tuple):
            self.items[name] = coalesce(mine + value)
        elif isinstance(mine, frozenset) and isinstance(value, frozenset):
            self.items[name] = mine | value
        else:
            raise ValueError(f"resource {name!r} used with two types")

    def __add__(self, other: Resources) -> Resources:
        out = self.copy()
        for name, value in other.items.items():
            out._add_one(name, value)
        return out

    def __sub__(self, other: Resources) -> Resources:
        out = self.copy()
        for name, value in other.items.items():
            mine = out.items.get(name)
            if mine is None or type(mine) is not type(value):
                continue
            result: ResourceValue
            if isinstance(mine, int):
                assert isinstance(value, int)
                result = max(0, mine - value)
            elif isinstance(mine, tuple):
                assert isinstance(value, tuple)
                result = ranges_subtract(mine, value)
            else:
                assert isinstance(value, frozenset)
                result = mine - value
            if _is_empty(result):
                del out.items[name]
            else:
                out.items[name] = result
        return out

    # -- presentation -------------------------------------------------------------------
    def to_json(self, role: str | None, pre_refinement: bool, endpoint: bool = False) -> list[dict[str, Any]]:
        """Render as ``Resource`` messages, allocated to ``role`` when given; reservations in
        the pre-refinement format (``role``, ``reservation``), or as the ``reservations``
        stack, or both (``endpoint``: what operator endpoints show, resources_utils.cpp's
        ``ENDPOINT`` format)."""
        out: list[dict[str, Any]] = []
        for key, value in self.items.items():
            name, reserved_to, dynamic = split_key(key)
            resource: dict[str, Any] = {"name": name}
            if isinstance(value, int):
                resource["type"] = "SCALAR"
                resource["scalar"] = {"value": from_fixed(value)}
            elif isinstance(value, tuple):
                resource["type"] = "RANGES"
                resource["ranges"] = {"range": [{"begin": b, "end": e} for b, e in value]}
            else:
                resource["type"] = "SET"
                resource["set"] = {"item": sorted(value)}
            if pre_refinement or endpoint:
                resource["role"] = reserved_to or "*"
                if dynamic:
                    resource["reservation"] = {}
            if (endpoint or not pre_refinement) and reserved_to is not None:
                resource["reservations"] = [{"type": DYNAMIC if dynamic else "STATIC", "role": reserved_to}]
            if role is not None:
                resource["allocation_info"] = {"role": role}
            out.append(resource)
        return out

    def describe(self, role: str | None = None) -> str:
        parts = []
        tag = f"(allocated: {role})" if role is not None else ""
        for key, value in self.items.items():
            name, reserved_to, dynamic = split_key(key)
            reservation = ""
            if reserved_to is not None:
                reservation = f"(reservations: [({DYNAMIC if dynamic else 'STATIC'},{reserved_to})])"
            parts.append(f"{name}{tag}{reservation}:{_fmt_value(value)}")
        return "; ".join(parts)

    def __str__(self) -> str:
        return self.describe()

    def __repr__(self) -> str:
        return f"Resources({self.describe()!r})"


def _is_empty(value: ResourceValue) -> bool:
    if isinstance(value, int):
        return value == 0
    return len(value) == 0


def _fmt_value(value: ResourceValue) -> str:
    if isinstance(value, int):
        return _fmt_scalar(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(f"{b}-{e}" for b, e in value) + "]"
    return "{" + ", ".join(sorted(value)) + "}"


_RANGE_RE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*$")
_NAME_RE = re.compile(r"^([A-Za-z_][\w.-]*)(?:\(([^()]+)\))?$")


def parse_value(text: str) -> ResourceValue:
    """Parse one flag value: ``4``, ``[1-2,5-9]`` or ``{a,b}``."""
    if text.startswith("[") and text.endswith("]"):
        pairs = []
        for piece in filter(None, (p.strip() for p in text[1:-1].split(","))):
            match = _RANGE_RE.match(piece)
            if not match:
                raise ValueError(f"invalid range {piece!r}")
            begin, end = int(match.group(1)), int(match.group(2))
            if begin > end:
                raise ValueError(f"invalid range {piece!r}: begin > end")
            pairs.append((begin, end))
        return coalesce(pairs)
    if text.startswith("{") and text.endswith("}"):
        return frozenset(filter(None, (p.strip() for p in text[1:-1].split(","))))
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"invalid scalar {text!r}")
    return to_fixed(value)


def parse_attributes(text: str) -> list[dict[str, Any]]:
    """Parse ``rack:r1;gen:3;zones:{a,b}`` into ``Attribute`` messages (Mesos rules)."""
    out: list[dict[str, Any]] = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, sep, raw = part.partition(":")
        if not sep or not name.strip():
            raise ValueError(f"invalid attribute {part!r} (expected name:value)")
        attribute: dict[str, Any] = {"name": name.strip()}
        raw = raw.strip()
        try:
            value = parse_value(raw)
        except ValueError:
            attribute["type"] = "TEXT"
            attribute["text"] = {"value": raw}
        else:
            if isinstance(value, int):
                attribute["type"] = "SCALAR"
                attribute["scalar"] = {"value": from_fixed(value)}
            elif isinstance(value, tuple):
                attribute["type"] = "RANGES"
                attribute["ranges"] = {"range": [{"begin": b, "end": e} for b, e in value]}
            else:
                attribute["type"] = "SET"
                attribute["set"] = {"item": sorted(value)}
        out.append(attribute)
    return out
