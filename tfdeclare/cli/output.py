"""Machine output: ``-o json`` and ``-o yaml`` print the same document, as JSON or as YAML.

The YAML is written by PyYAML's safe dumper (libyaml's ``CSafeDumper`` when built with it):
plain mappings, lists and scalars, never an object tag (``!!python/...``), never an anchor or an
alias for a value that appears twice, keys in the document's own order as the JSON has them,
Unicode as it is. What ``json.dumps`` writes for a subclass of ``str``, ``int`` or ``float`` (an
enum of ours) or a tuple, the YAML writes the same way: ``yaml.safe_load`` of the YAML equals
``json.loads`` of the JSON. PyYAML is imported only when YAML is asked for.
"""

from __future__ import annotations

import json
from typing import Any

OUTPUT_FORMATS = ("text", "json", "yaml")  # the -o values of a command that prints results
DOCUMENT_FORMATS = frozenset({"json", "yaml"})  # one document for machines, no progress lines


def is_document(output: str) -> bool:
    """Whether ``output`` asks for one machine-readable document (json or yaml)."""
    return output in DOCUMENT_FORMATS


def document_text(document: Any, output: str, *, ensure_ascii: bool = True) -> str:
    """``document`` as the text ``-o json`` (indented, as each command always wrote it) or
    ``-o yaml`` prints, ending in a newline."""
    if output == "yaml":
        return yaml_text(document)
    return json.dumps(document, indent=2, ensure_ascii=ensure_ascii) + "\n"


def yaml_text(document: Any, *, start: bool = False) -> str:
    """``document`` as block-style YAML; ``start``: with the ``---`` that opens a document of a
    stream (``logs -o yaml``: one per line)."""
    import yaml

    text: str = yaml.dump(
        document,
        Dumper=_dumper(),
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=1 << 16,  # a long message stays on one line, as in the JSON
        explicit_start=start,
    )
    return text


_DUMPER: Any = None


def _dumper() -> Any:
    """The safe dumper, taught what ``json.dumps`` also writes: tuples as lists, subclasses of
    the scalar types as their plain values; and never to alias a repeated value."""
    global _DUMPER
    if _DUMPER is None:
        import yaml

        base: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

        class Dumper(base):  # type: ignore[misc]
            def ignore_aliases(self, data: Any) -> bool:
                return True

        Dumper.add_representer(tuple, lambda d, v: d.represent_list(list(v)))
        Dumper.add_multi_representer(str, lambda d, v: d.represent_str(str.__str__(v)))
        Dumper.add_multi_representer(int, _int_like)
        Dumper.add_multi_representer(float, lambda d, v: d.represent_float(float(v)))
        _DUMPER = Dumper
    return _DUMPER


def _int_like(dumper: Any, value: int) -> Any:
    if isinstance(value, bool):
        return dumper.represent_bool(bool(value))
    return dumper.represent_int(int(value))
