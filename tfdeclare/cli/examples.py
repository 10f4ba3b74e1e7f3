"""The examples at the end of every command's ``--help``. Each command has at least one (a
test checks every command of the parser), kept here so that adding a command is adding its
parser and its lines below."""

from __future__ import annotations

import argparse
from typing import Any

EXAMPLES: dict[str, tuple[str, ...]] = {
    "": (
        "tfdeclare validate specs/",
        "tfdeclare plan specs/ && tfdeclare apply specs/ --wait",
        "tfdeclare status",
        "tfdeclare COMMAND --help",
    ),
    "validate": (
        "tfdeclare validate specs/                 # every *.yaml/*.yml below specs/",
        "tfdeclare validate specs/bert.yaml -o json",
        "helm template chart/ | tfdeclare validate -   # a spec on standard input",
    ),
    "plan": (
        "tfdeclare plan specs/",
        "tfdeclare plan specs/ --prune --out plan.json     # then: tfdeclare apply plan.json",
        "tfdeclare plan specs/ --detailed-exitcode          # exit 2 when something changes",
        "tfdeclare plan specs/ -o markdown --link-base https://github.com/OWNER/REPO/blob/COMMIT",
    ),
    "apply": (
        "tfdeclare apply specs/",
        "tfdeclare apply specs/ --wait --timeout 3600   # until every job Succeeded or Failed",
        "tfdeclare apply plan.json                      # exactly a saved plan, or refuse it if stale",
    ),
    "status": (
        "tfdeclare status",
        "tfdeclare status bert",
        "tfdeclare status -o json",
        "tfdeclare status -l team=vision -l tier!=batch   # by metadata.labels",
        "tfdeclare status --watch                # a row per change, until Ctrl-C",
        "tfdeclare status bert --watch -o json   # until it ends: exit 0 Succeeded, 1 Failed",
        "tfdeclare status --refresh   # reconcile once first (no daemon running)",
    ),
    "history": (
        "tfdeclare history                      # newest first: revision, outcome, jobs changed",
        "tfdeclare history bert                 # the revisions that touched bert, each attempt",
        "tfdeclare history -o json --limit 5",
    ),
    "logs": (
        "tfdeclare logs bert                   # every task, each line prefixed: worker-0 | ...",
        "tfdeclare logs bert --task worker-1 --follow            # worker:1 works too",
        "tfdeclare logs bert --tail 20 --previous   # a restarted task's last 20 lines before it",
        "tfdeclare logs bert -o json | jq -r 'select(.task == \"chief-0\") | .line'",
    ),
    "delete": (
        "tfdeclare delete bert",
        "tfdeclare delete --all --timeout 300",
        "tfdeclare delete -l team=vision          # the jobs with that label",
    ),
    "gc": ("tfdeclare gc --dry-run", "tfdeclare gc --state-dir /var/lib/tfdeclare"),
    "daemon": (
        "tfdeclare daemon --specs specs/",
        "tfdeclare daemon --git https://github.com/OWNER/jobs.git --branch main --path specs --prune",
    ),
    "schema": (
        "tfdeclare schema job > job.schema.json   # for editors (yaml-language-server)",
        "tfdeclare schema config",
    ),
    "explain": (
        "tfdeclare explain spec.replicas.worker        # a role's fields, as kubectl explain",
        "tfdeclare explain spec.restartPolicy          # the allowed values and the default",
        "tfdeclare explain '$.spec.volumes[0].mode'    # a JSON path, as diagnostics print it",
        "tfdeclare explain spec --recursive            # every field below, as a tree",
        "tfdeclare explain --schema config local.runtime",
    ),
    "version": ("tfdeclare version", "tfdeclare version -o json"),
    "convert": (
        "tfdeclare convert tfjob.yaml                 # the native spec on stdout, comments kept",
        "tfdeclare convert --write k8s/*.yaml         # rewrite the manifests in place",
    ),
    "completion": (
        "source <(tfdeclare completion bash)        # in ~/.bashrc",
        "source <(tfdeclare completion zsh)         # in ~/.zshrc, after compinit",
        "tfdeclare completion fish | source         # in ~/.config/fish/config.fish",
    ),
}


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, with the examples' lines kept as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def epilog(command: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in EXAMPLES[command])


def add_examples(parser: argparse.ArgumentParser) -> None:
    """Give the top-level parser and every command's parser its examples."""
    parser.formatter_class = HelpFormatter
    parser.epilog = epilog("")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            commands: dict[str, Any] = action.choices
            for name, sub in commands.items():
                sub.formatter_class = HelpFormatter
                if name in EXAMPLES:
                    sub.epilog = epilog(name)
