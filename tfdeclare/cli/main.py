"""Command-line entry point (filled in by the CLI module)."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    raise SystemExit("tfdeclare: not built yet")
