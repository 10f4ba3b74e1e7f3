"""Kubernetes' ``$(NAME)`` references in a container's command, args, env values and
``subPathExpr``, expanded as the kubelet expands them: a name with a known value becomes it,
``$$`` is one ``$`` (so ``$$(X)`` is the literal ``$(X)``), and anything else stays as
written (an unknown name, a ``$`` before another character, a ``$(`` never closed). Pure."""

from __future__ import annotations

from collections.abc import Mapping


def expand(text: str, values: Mapping[str, str | None]) -> tuple[str, list[str]]:
    """``text`` expanded from ``values`` (a name -> None: set, but not known here), and the
    names of the references left as written, in order."""
    out: list[str] = []
    left: list[str] = []
    cursor = 0
    while (found := text.find("$", cursor)) != -1 and found + 1 < len(text):
        out.append(text[cursor:found])
        after = text[found + 1]
        close = text.find(")", found + 2) if after == "(" else -1
        if after == "$":
            out.append("$")
            cursor = found + 2
        elif close == -1:  # not a reference: the $ and the character after it, as they are
            out.append(text[found : found + 2])
            cursor = found + 2
        else:
            name = text[found + 2 : close]
            value = values.get(name)
            if value is None:
                left.append(name)
            out.append(value if value is not None else f"$({name})")
            cursor = close + 1
    return "".join(out) + text[cursor:], left
