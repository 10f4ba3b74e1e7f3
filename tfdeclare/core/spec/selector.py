"""Label selectors (``-l`` on ``status``, ``logs``, ``delete`` and ``plan``), as kubectl reads
them: ``KEY=VALUE`` (also ``KEY==VALUE``), ``KEY!=VALUE`` (a job without the label matches too),
``KEY`` (has the label) and ``!KEY`` (has it not); terms are joined by commas or given as
several ``-l``, and a job matches when every term does. Keys and values are checked as the job
spec checks ``metadata.labels`` (``schemas/job.schema.json``), so a selector that could match
nothing by its spelling is an error, never an empty answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

_KEY = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_./]{0,61}[A-Za-z0-9])?$")
_VALUE_MAX = 253


class SelectorError(ValueError):
    """A selector that cannot be read; the message says which term and why."""


class Operator(Enum):
    EQUALS = "="
    NOT_EQUALS = "!="
    EXISTS = "exists"
    NOT_EXISTS = "!exists"


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: Operator
    value: str = ""

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator is Operator.EQUALS:
            return labels.get(self.key) == self.value
        if self.operator is Operator.NOT_EQUALS:
            return labels.get(self.key) != self.value
        if self.operator is Operator.EXISTS:
            return self.key in labels
        return self.key not in labels

    def __str__(self) -> str:
        if self.operator is Operator.EXISTS:
            return self.key
        if self.operator is Operator.NOT_EXISTS:
            return f"!{self.key}"
        return f"{self.key}{self.operator.value}{self.value}"


@dataclass(frozen=True)
class Selector:
    """Every requirement of every ``-l`` given; an empty one matches every job."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | Iterable[tuple[str, str]]) -> bool:
        found = dict(labels.items() if isinstance(labels, Mapping) else labels)
        return all(r.matches(found) for r in self.requirements)

    def __bool__(self) -> bool:
        return bool(self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def _key(key: str, term: str) -> str:
    if not _KEY.match(key):
        raise SelectorError(
            f"label selector {term!r}: {key!r} is not a label key (at most 63 letters, digits, "
            "'-', '_', '.' or '/', starting and ending with a letter or digit)"
        )
    return key


def _term(term: str) -> Requirement:
    text = term.strip()
    if not text:
        raise SelectorError("label selector: an empty term (two commas, or a comma at an end)")
    for operator, sign in ((Operator.NOT_EQUALS, "!="), (Operator.EQUALS, "=="), (Operator.EQUALS, "=")):
        if sign in text:
            key, _, value = text.partition(sign)
            if "=" in value or "!" in value:
                raise SelectorError(f"label selector {term!r}: one operator a term (=, == or !=)")
            if len(value) > _VALUE_MAX:
                raise SelectorError(
                    f"label selector {term!r}: a label value has at most {_VALUE_MAX} characters"
                )
            return Requirement(_key(key.strip(), term), operator, value.strip())
    if text.startswith("!"):
        return Requirement(_key(text[1:].strip(), term), Operator.NOT_EXISTS)
    if any(c in text for c in " ()<>"):
        raise SelectorError(
            f"label selector {term!r}: only KEY=VALUE, KEY!=VALUE, KEY and !KEY are understood "
            "(set-based selectors such as `in (...)` are not)"
        )
    return Requirement(_key(text, term), Operator.EXISTS)


def parse(texts: Iterable[str]) -> Selector:
    """The selector of the ``-l`` arguments given (each a comma-separated list of terms)."""
    requirements: list[Requirement] = []
    for text in texts:
        requirements.extend(_term(term) for term in text.split(","))
    return Selector(tuple(requirements))
