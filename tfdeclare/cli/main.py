"""The ``tfdeclare`` command: argument parsing, dispatch and exit codes.

Imports of heavy modules happen inside the commands, so ``tfdeclare validate`` starts fast.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
import traceback

from tfdeclare import __version__
from tfdeclare.backends.errors import BackendError
from tfdeclare.cli import completion, examples, parsers, parting
from tfdeclare.cli.common import (
    EXIT_ERROR,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    UserError,
    add_common_options,
    print_diagnostics,
    stderr_line,
)
from tfdeclare.files import JobWriteError, failed_write


def build_parser() -> argparse.ArgumentParser:
    parser = parsers.Parser(
        prog="tfdeclare",
        description="Declarative runner for distributed TensorFlow training: validate, plan, apply.",
    )
    parser.add_argument("--version", action="version", version=f"tfdeclare {__version__}")
    # Common options go before or after the command; after it, they win. The subcommands'
    # copies default to "not given" so they never hide a value given before the command.
    add_common_options(parser)
    common = parsers.Parser(add_help=False, argument_default=argparse.SUPPRESS)
    add_common_options(common)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    parsers.add_parsers(sub, common)
    examples.add_examples(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    # Commands build large object graphs once (10,000 specs: millions of objects) and make
    # few cycles: collecting rarely saves about a third of a big plan (docs/benchmarks.md).
    gc.set_threshold(100_000, 50, 100)
    parser = build_parser()
    completion.complete_if_asked(parser)
    args = parser.parse_args(argv)
    module, _, function = args.handler.partition(":")
    command = getattr(importlib.import_module(module), function)
    try:
        return int(command(args))
    except UserError as err:
        print_diagnostics(err.diagnostics)
        stderr_line(f"tfdeclare: error: {err}")
        return EXIT_ERROR
    except BackendError as err:  # e.g. the cluster is unreachable: nothing running is harmed
        stderr_line(f"tfdeclare: error: {err}")
        return EXIT_ERROR
    except KeyboardInterrupt:
        stderr_line("tfdeclare: interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_ERROR
    except JobWriteError as err:  # a full or read-only state disk while applying or deleting
        stderr_line(f"tfdeclare: error: {err}; free the disk and run the command again")
        return EXIT_ERROR
    except OSError as err:  # the environment (a full or read-only disk), not a bug: no traceback
        stderr_line(f"tfdeclare: error: {failed_write(err)}")
        return EXIT_ERROR
    except Exception as err:
        if _is_state_error(err):  # a state folder that cannot be read: named, never a trace
            stderr_line(f"tfdeclare: error: {err}")
            return EXIT_ERROR
        stderr_line("tfdeclare: internal error (this is a bug; please report it with the trace below)")
        traceback.print_exc(file=sys.stderr)
        return EXIT_INTERNAL
    finally:
        if argv is None:  # the program itself, which ends now (not a caller in this process)
            parting.exiting()


def _is_state_error(err: Exception) -> bool:
    """Whether ``err`` is the store's ``StateError`` (looked up, not imported: a command that
    reads no state folder does not load the store)."""
    store = sys.modules.get("tfdeclare.shell.store")
    return store is not None and isinstance(err, store.StateError)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
