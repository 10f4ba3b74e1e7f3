"""The fixed bootstrap a task runs when its cluster is delivered out of band (``clusterwire``).

The task's command becomes ``python3 -c BOOTSTRAP ARGV...``: ``BOOTSTRAP`` is one of three
fixed texts, one per ``clusterSpec`` style (``program``: the same for every task of every job
of that style; no user string is ever put into code; the user's argv stays a list of
arguments, never parsed by a shell or by Python). It needs only ``python3`` (3.6 or later, the
standard library) on the agent or in the image, which TensorFlow's images have.

Its environment holds ``$TFDECLARE_CLUSTER`` (``FETCH_ENV``): ``KEY URL``, the task's own
key (``clusterserver``: derived from its generation's secret, never sent on the wire) and the
URL of the framework's cluster server with the task's token. It:

1. removes that variable (the program never sees the key nor the token), then GETs the URL,
   bypassing any proxy of the environment, each try bounded (``TRY_TIMEOUT_S``), answers
   bounded (16 MiB), retrying while the server is unreachable or busy (``FETCH_TRIES`` tries
   ``FETCH_PAUSE_S`` apart: 2 to 12 minutes); a 403 or 404 (a stale or wrong token) ends the
   tries;
2. checks the answer: its first 32 bytes must be the HMAC-SHA256 under the key of the rest
   (``hmac.compare_digest``), so only the holder of the key (the framework) can answer;
3. on any failure writes ``tfdeclare: cannot fetch the cluster: WHY`` to stderr and exits with
   ``FETCH_FAILED_EXIT`` (``WHY`` is ``not signed by the framework`` for an answer that fails
   the check: whoever answered at that address is not the framework), having applied nothing;
4. otherwise applies only what a task's cluster is in its job's style, nothing else of the
   answer: ``TF_CONFIG`` (styles ``tf_config`` and ``both``: exactly the bytes it would have had
   in band; no other variable is ever set) and, in one pass over each argument, the four legacy
   placeholders ``{ps_hosts}``, ``{worker_hosts}``, ``{job_name}`` and ``{task_index}``
   (styles ``legacy_flags`` and ``both``: ``tfdeclare.core.run.clusterspec.substitute``'s
   result; any other brace stays as written; in style ``tf_config`` the argv is left as
   written, as in band), and ``os.execvp``'s the argv: the user's program replaces the
   bootstrap (same pid, signals and exit status its own; a program that cannot be executed ends
   it with ``tfdeclare: cannot run PROGRAM: ...``, exit 1).

The bootstrap travels in every TaskInfo (``bench/wire_bench.py``: 650 to 750 bytes of the
2 KB of a task's TaskInfo), hence one line per statement and one-letter names, each line explained
in ``_lines`` below: ``e`` the environment, ``k`` the key, ``q`` the URL, ``o`` the opener, ``c``
the start of both error messages, ``b`` the answer, ``w`` ``True`` once the answer is checked
else why not, ``d`` the document, ``a`` the argv. A style without legacy flags does without the
substitution (and ``re``), one without ``TF_CONFIG`` without setting it: each job's tasks carry
only the code that applies what their style delivers.
"""

from __future__ import annotations

from tfdeclare.core.enums import ClusterSpecStyle
from tfdeclare.core.run.clusterdoc import with_flags, with_tf_config

FETCH_TRIES = 60
FETCH_PAUSE_S = 2
TRY_TIMEOUT_S = 10
FETCH_FAILED_EXIT = 86  # the bootstrap could not fetch the task's cluster (never the program's)
FETCH_ENV = "TFDECLARE_CLUSTER"
INTERPRETER = "python3"
MAC_BYTES = 32  # an answer is the HMAC-SHA256 of the document, then the document
FLAGS = ("ps_hosts", "worker_hosts", "job_name", "task_index")
UNSIGNED = "not signed by the framework"


def _lines(tf_config: bool, flags: bool) -> list[str]:
    """The bootstrap's statements, one per line, for a style with ``TF_CONFIG`` and/or the
    legacy flags. Python 3.6 or later."""
    lines = [
        # The standard library only; ``re`` for the placeholders
        f"import hmac,json,os,{'re,' if flags else ''}sys,time,urllib.request as u",
        # Key and URL out of the environment; an opener without the environment's proxies
        f"e=os.environ;k,q=e.pop('{FETCH_ENV}').split();o=u.build_opener(u.ProxyHandler({{}}));"
        "c='tfdeclare: cannot '",
        f"for n in range({FETCH_TRIES}):",
        # One try: the answer (at most 16 MiB), checked: w is True, or why the answer is refused
        f" try:b=o.open(q,timeout={TRY_TIMEOUT_S}).read(1<<24);w=hmac.compare_digest(b[:{MAC_BYTES}],"
        f"hmac.new(k.encode(),b[{MAC_BYTES}:],'sha256').digest())or'{UNSIGNED}';break",
        # A failed try: why; a stale or wrong token ends the tries, anything else waits and retries
        " except Exception as x:",
        "  w=x",
        "  if getattr(x,'code',0)in(403,404):break",
        f"  time.sleep({FETCH_PAUSE_S})",
        # Not fetched or not the framework's: say why, exit with our code, having applied nothing
        f"if w!=1:print(c+'fetch the cluster:',w,file=sys.stderr);sys.exit({FETCH_FAILED_EXIT})",
        f"d=json.loads(b[{MAC_BYTES}:])",
    ]
    if tf_config:  # the one variable an answer sets (the framework's always holds it)
        lines.append("e['TF_CONFIG']=d['TF_CONFIG']")
    if flags:  # the four placeholders, in one pass over each argument; any other brace kept
        pattern = "|".join(FLAGS)
        lines.append(f"a=[re.sub('{{({pattern})}}',lambda m:d.get(m[1],m[0]),s)for s in sys.argv[1:]]")
    else:
        lines.append("a=sys.argv[1:]")
    lines += [
        # The user's program replaces the bootstrap
        "try:os.execvp(a[0],a)",
        "except OSError as x:sys.exit(c+'run %s: %s'%(a[0],x))",
    ]
    return lines


def program(style: ClusterSpecStyle) -> str:
    """The bootstrap of a job of ``style``."""
    return "\n".join(_lines(with_tf_config(style), with_flags(style))) + "\n"


BOOTSTRAPS = {style: program(style) for style in ClusterSpecStyle}


def bootstrap_argv(style: ClusterSpecStyle, argv: tuple[str, ...]) -> tuple[str, ...]:
    """The command of a task whose cluster is fetched: the bootstrap of its job's style, then
    its own argv."""
    return (INTERPRETER, "-c", BOOTSTRAPS[style], *argv)


def fetch_value(key: str, url: str) -> str:
    """``$TFDECLARE_CLUSTER`` of a task: its key, then the URL it fetches (neither has a space)."""
    return f"{key} {url}"
