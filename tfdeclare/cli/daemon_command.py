"""``tfdeclare daemon``: keep the jobs converged on a folder or a git branch.

It holds the state folder's lock for as long as it runs (``apply`` then points here), logs
as text or JSON lines, and stops on SIGTERM or Ctrl-C after the pass in flight, leaving every
task running for the next controller to adopt: exit 0 after SIGTERM (asked to stop), 130
after SIGINT (interrupted, as every command).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import logging
import os
import signal
import socket
import sys
import time
from dataclasses import replace
from pathlib import Path

from tfdeclare.backends import progress
from tfdeclare.cli.common import EXIT_INTERRUPTED, EXIT_OK, Settings, UserError, settings_from, state_dir_note
from tfdeclare.cli.logformat import JsonFormatter, LineFormatter
from tfdeclare.cli.pulls import PlainPulls
from tfdeclare.cli.wiring import controller_for, locked
from tfdeclare.controller import Controller
from tfdeclare.core.config import DaemonConfig
from tfdeclare.daemon.httpguard import AccessPolicy, check_listen
from tfdeclare.daemon.server import DaemonServer, ListenError
from tfdeclare.daemon.service import Daemon, DaemonOptions, Source
from tfdeclare.daemon.signatures import SignaturePolicy, SignatureSetupError
from tfdeclare.daemon.sources import FolderSource, GitSettings, GitSource, SourceError, check_branches
from tfdeclare.daemon.webhook_auth import WebhookPolicy
from tfdeclare.shell.problems import path_in as problems_path_in
from tfdeclare.shell.sources import SpecFiles, prune_scope, spec_sources


def _setup_logging(fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        formatter = LineFormatter("%(asctime)s %(levelname)-7s %(message)s", "%Y-%m-%dT%H:%M:%SZ")
        formatter.converter = time.gmtime
        handler.setFormatter(formatter)
    root = logging.getLogger("tfdeclare")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    root.propagate = False
    # Libraries log in our format, and only what needs a person: watchdog warns about events it
    # drops while a watched folder is replaced, which the next resync covers anyway.
    # httpx logs each request's URL at INFO, and a webhook's URL may hold a token.
    quiet = {
        "watchdog": logging.ERROR,
        "kazoo": logging.WARNING,
        "httpx": logging.WARNING,
    }
    for name, level in quiet.items():
        library = logging.getLogger(name)
        library.handlers[:] = [handler]
        library.setLevel(level)
        library.propagate = False


def folders_in_use(controller: Controller) -> set[str]:
    """The source folders that job records and live tasks refer to (their git snapshots are
    kept)."""
    used = {r.source_dir for r in controller.store.records().values() if r.source_dir}
    used.update(
        t.extra["source"] for t in controller.backend.observe() if t.state.alive and t.extra.get("source")
    )
    return used


def page_url(host: str, port: int) -> str:
    """Where others reach the status page: this machine's name for a wildcard address."""
    if host in ("", "0.0.0.0", "::"):  # noqa: S104 - a comparison, not a bind
        host = socket.getfqdn()
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/"


def _secret(name: str, file: str | None, env: str | None) -> str | None:
    """The value of the config's ``<name>File`` or ``<name>Env`` (trailing newline dropped);
    ``UserError`` naming the setting, never the value."""
    value: str | None = None
    if file is not None:
        try:
            value = Path(file).read_text(encoding="utf-8").rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as err:
            raise UserError(f"cannot read daemon.{name}File {file}: {type(err).__name__}") from None
    elif env is not None:
        value = os.environ.get(env)
        if value is None:
            raise UserError(f"daemon.{name}Env: the variable {env} is not set")
    return value


def access_policy(config: DaemonConfig, host: str, branch: str | None = None) -> AccessPolicy:
    """Who may use the endpoints (``tfdeclare.daemon.httpguard``): the token read from its file
    or variable, the webhook secret likewise (deliveries to ``branch``, None in folder mode,
    sync), the names served; refused (``UserError``) where the host needs a token."""
    token = _secret("token", config.token_file, config.token_env)
    if token is not None and len(token) < 16:
        raise UserError(
            "the daemon's token is too short: use 16 characters or more (e.g. openssl rand -hex 32)"
        )
    secret = _secret("webhookSecret", config.webhook_secret_file, config.webhook_secret_env)
    if secret is not None and len(secret.strip()) < 16:
        raise UserError(
            "the daemon's webhook secret is too short: use 16 characters or more "
            "(e.g. openssl rand -hex 32), and give the git host the same"
        )
    webhook = WebhookPolicy(secret, branch, config.webhook_max_body_bytes) if secret is not None else None
    names = {n.lower() for n in (*config.server_names, socket.gethostname(), socket.getfqdn(), host)}
    policy = AccessPolicy(frozenset(names), token, config.token_for_reads, webhook)
    problem = check_listen(host, policy)
    if problem is not None:
        raise UserError(problem)
    return policy


def _signatures(config: DaemonConfig) -> SignaturePolicy | None:
    if config.allowed_signers is None and config.gpg_keyring is None:
        return None
    return SignaturePolicy(config.allowed_signers, config.gpg_keyring)


def cmd_daemon(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    daemon_config = settings.config.daemon
    _setup_logging(args.log_format or daemon_config.log_format)
    host = args.host or daemon_config.host
    access = access_policy(daemon_config, host, args.branch if args.git else None)  # before anything starts
    port = args.port if args.port is not None else daemon_config.port
    try:  # the port first: when it is taken, nothing else has started (no lock, no thread)
        server = DaemonServer(host, port, None, access)
    except ListenError as err:
        raise UserError(str(err)) from None
    with contextlib.closing(server):
        return _serve(args, settings, server)


def _serve(args: argparse.Namespace, settings: Settings, server: DaemonServer) -> int:
    daemon_config = settings.config.daemon
    log = logging.getLogger("tfdeclare.daemon")
    progress.set_receiver(PlainPulls(log.info))  # image pulls, a line per layer, in the log
    source: Source
    base_dir: Path
    try:
        if args.git:
            git = GitSettings(
                args.git,
                args.branch,
                args.path,
                args.status_branch or daemon_config.status_branch,
                args.push_status,
                _signatures(daemon_config),
                daemon_config.git_timeout_s,
            )
            check_branches(git)  # a name git refuses fails now, not at every pass
            source = GitSource(git, settings.state_dir / "git")
            base_dir = source.current
            # every revision's snapshot: a job applied from an earlier commit is the daemon's too,
            # and so is every job applied from a revision wherever it was read (core.plan.scope)
            scope = replace(prune_scope([source.revisions_dir], [source.description]), revisions=True)
        else:
            folder = Path(args.specs)
            if not folder.is_dir():
                raise UserError(f"--specs {folder}: no such folder")
            settings.refuse_overlap([folder])
            source = FolderSource(folder, [settings.state_dir, settings.status_dir])
            base_dir = Path.cwd()
            scope = prune_scope([folder])
    except (SourceError, SignatureSetupError) as err:
        raise UserError(str(err)) from err
    interval = args.interval if args.interval is not None else daemon_config.interval_s
    options = DaemonOptions(
        interval,
        daemon_config.debounce_s,
        args.prune,
        args.allow_empty,
        daemon_config.settle_s,  # folder mode only: a git revision is read whole (Source.whole)
        settings.config.webhooks,
        settings.config.policy.quotas,
        scope=scope,
        max_jobs=settings.config.policy.max_jobs,
    )
    host, port = server.address
    if args.port != 0 and (args.port is not None or daemon_config.port):  # not "any free port" (tests)
        settings = settings.with_page_url(page_url(args.host or daemon_config.host, port))
    with contextlib.ExitStack() as stack:
        stack.callback(source.close)
        stack.enter_context(locked(settings, "daemon", source=source.description))
        controller = stack.enter_context(controller_for(settings))
        controller.base_dir = base_dir
        if isinstance(source, GitSource):
            source.in_use = lambda: folders_in_use(controller)
        sources = spec_sources([source.specs_path], base_dir if args.git else None)
        controller.sources = sources  # recorded with each job: its workingDir's bound at launch
        files = SpecFiles(
            [source.specs_path],
            # the files' verdict: what the machine offers now (an engine that answers, an
            # image there) is each job's runtime condition instead (backends' placement)
            checks=settings.reading(sources).spec_checks,
            exclude=(settings.state_dir, settings.status_dir),
            skip_files=settings.config_files,
            base=base_dir if args.git else None,
            confined=bool(args.git),  # --path must not lead out of the repository
        )
        problems = problems_path_in(settings.state_dir)  # for `tfdeclare status`
        daemon = Daemon(source, controller, files, settings.status_dir, options, problems_path=problems)
        note = state_dir_note(settings)
        if note:
            log.info("%s", note)
        server.start(daemon)
        stack.callback(server.close)
        log.info(
            "tfdeclare daemon listening on http://%s:%d (%s, interval %gs)",
            host,
            port,
            source.description,
            interval,
        )

        interrupted = False

        def stop(signum: int, frame: object) -> None:
            nonlocal interrupted
            interrupted = interrupted or signum == signal.SIGINT
            log.info("stopping (signal %d); the jobs keep running", signum)
            daemon.stop()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        # `kill -USR1 PID` writes every thread's stack to the daemon's stderr (a stuck pass or
        # stop can be looked at without stopping it)
        faulthandler.register(signal.SIGUSR1, all_threads=True)
        daemon.run()
    log.info("stopped")
    return EXIT_INTERRUPTED if interrupted else EXIT_OK
