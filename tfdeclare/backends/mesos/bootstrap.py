"""The fixed bootstrap a task runs when its cluster is delivered out of band (``clusterwire``).

The task's command becomes ``python3 -c BOOTSTRAP ARGV...``: ``BOOTSTRAP`` is one of three
fixed texts, one per ``clusterSpec`` style (``program``: the same for every task of every job
of that style; no user string is ever put into code; the user's argv stays a list of
arguments, never parsed by a shell or by Python). It needs only ``python3`` (3.6 or later, the
standard library) on the agent or in the image, which TensorFlow's images have.

Its environment holds ``$TFDECLARE`` (``FETCH_ENV``): ``KEY URL JOB ROLE INDEX ATTEMPT``,
the task's own key (``clusterserver``: derived from its generation's secret, never sent on the
wire), the URL of the framework's cluster server with the task's token
(``http://HOST:PORT/TOKEN``), then the values of the task's ``TFDECLARE_JOB``, ``_ROLE``,
``_INDEX`` and ``_ATTEMPT`` (``IDENTITY_ENV``), which its TaskInfo carries there rather than
one by one (all four, or none). It:

1. removes that variable (the program never sees the key nor the token), sets those four
   variables from it, then GETs the URL, bypassing any proxy of the environment, each try
   bounded (``TRY_TIMEOUT_S``), answers bounded (16 MiB), retrying while the server is
   unreachable or busy (``FETCH_TRIES`` tries ``FETCH_PAUSE_S`` apart: 2 to 12 minutes); an
   answer 4xx (a stale or wrong token: 403) ends the tries, after the one pause;
2. checks the answer: its first 32 bytes must be the HMAC-SHA256 under the key of the rest
   (``hmac.compare_digest``), so only the holder of the key (the framework) can answer;
3. on any failure writes ``tfdeclare: cannot fetch the cluster: WHY`` to stderr and exits with
   ``FETCH_FAILED_EXIT`` (``WHY`` is ``bad signature`` for an answer that fails
   the check: whoever answered at that address is not the framework), having applied nothing;
4. otherwise applies only what a task's cluster is in its job's style, nothing else of the
   answer: ``TF_CONFIG`` (styles ``tf_config`` and ``both``: exactly the bytes it would have had
   in band; no other variable is ever set from the answer) and, in one pass over each
   argument, the four legacy placeholders ``{ps_hosts}``, ``{worker_hosts}``, ``{job_name}``
   and ``{task_index}``
   (styles ``legacy_flags`` and ``both``: ``tfdeclare.core.run.clusterspec.substitute``'s
   result; any other brace stays as written; in style ``tf_config`` the argv is left as
   written, as in band), and ``os.execvp``'s the argv: the user's program replaces the
   bootstrap (same pid, signals and exit status its own; a program that cannot be executed ends
   it with ``tfdeclare: cannot run PROGRAM: ...``, exit 1).

The bootstrap travels in every TaskInfo (``bench/wire_bench.py``: 680 to 770 bytes of the
2 KB of a task's TaskInfo), hence few lines and one-letter names, each line explained in
``_lines`` below: ``e`` the environment, ``k`` the key, ``q`` the URL, ``v`` the four values,
``c`` the start of both error messages, ``b`` the answer, ``w`` ``True`` once the answer is
checked else why not, ``d`` the document, ``a`` the argv. A style without legacy flags does
without the substitution (and ``re``), one without ``TF_CONFIG`` without setting it: each
job's tasks carry only the code that applies what their style delivers.

Tasks launched by an earlier version carry that version's bootstrap (``$TFDECLARE_CLUSTER``:
``KEY http://HOST:PORT/v1/cluster?token=TOKEN``, the four variables one by one); the cluster
server still answers that route, with the same tokens and keys.
"""

from __future__ import annotations

from tfdeclare.core.enums import ClusterSpecStyle
from tfdeclare.core.run.clusterdoc import with_flags, with_tf_config

FETCH_TRIES = 60
FETCH_PAUSE_S = 2
TRY_TIMEOUT_S = 10
FETCH_FAILED_EXIT = 86  # the bootstrap could not fetch the task's cluster (before the server answered it)
FETCH_ENV = "TFDECLARE"  # TFDECLARE_CLUSTER before: tasks launched before carry their own bootstrap
INTERPRETER = "python3"
MAC_BYTES = 32  # an answer is the HMAC-SHA256 of the document, then the document
FLAGS = ("ps_hosts", "worker_hosts", "job_name", "task_index")
UNSIGNED = "bad signature"  # "not signed by the framework" before
# The four placeholders as one alternation, ``ps_hosts`` and ``worker_hosts`` sharing a suffix
PATTERN = "(ps|worker)_hosts|job_name|task_index"
# The task's variables that a fetching task's TaskInfo carries packed in ``FETCH_ENV`` (after
# the key and the URL, in this order) rather than one by one: the bootstrap sets them back
IDENTITY_PREFIX = "TFDECLARE_"
IDENTITY = ("JOB", "ROLE", "INDEX", "ATTEMPT")
IDENTITY_ENV = tuple(IDENTITY_PREFIX + name for name in IDENTITY)


def _lines(tf_config: bool, flags: bool) -> list[str]:
    """The bootstrap's statements, one per line (several on a line, after ``;``, where Python
    allows it: a line break costs two bytes of JSON, a ``;`` one), for a style with
    ``TF_CONFIG`` and/or the legacy flags. Python 3.6 or later."""
    apply = [f"d=json.loads(b[{MAC_BYTES}:])"]
    if tf_config:  # the one variable an answer sets (the framework's always holds it)
        apply.append("e['TF_CONFIG']=d['TF_CONFIG']")
    if flags:  # the four placeholders, in one pass over each argument; any other brace kept
        apply.append(f"a=[re.sub('{{({PATTERN})}}',lambda m:d.get(m[1],m[0]),s)for s in sys.argv[1:]]")
    else:
        apply.append("a=sys.argv[1:]")
    return [
        # The standard library only (``re`` for the placeholders); key and URL out of the
        # environment; an opener without the environment's proxies; both error messages' start
        f"import hmac,json,os,{'re,' if flags else ''}sys,time,urllib.request as u;e=os.environ;"
        f"k,q,*v=e.pop('{FETCH_ENV}').split();c='tfdeclare: cannot '",
        # The task's own variables, packed after the URL (``fetch_value``), set under their names
        f"for n,x in zip('{' '.join(IDENTITY)}'.split(),v):e['{IDENTITY_PREFIX}'+n]=x",
        f"for n in range({FETCH_TRIES}):",
        # One try (no data, a timeout): the answer (at most 16 MiB), checked: w is True, or why
        # the answer is refused
        f" try:b=u.build_opener(u.ProxyHandler({{}})).open(q,None,{TRY_TIMEOUT_S}).read(1<<24);"
        f"w=hmac.compare_digest(b[:{MAC_BYTES}],"
        f"hmac.new(k.encode(),b[{MAC_BYTES}:],'sha256').digest())or'{UNSIGNED}';break",
        # A failed try: why, and a pause; an answer 4xx (a stale or wrong token) ends the tries,
        # anything else (unreachable, busy) retries
        f" except Exception as x:w=x;time.sleep({FETCH_PAUSE_S})",
        " if getattr(w,'code',0)//100==4:break",
        # Not fetched or not the framework's: say why, exit with our code, having applied nothing
        f"if w!=1:print(c+'fetch the cluster:',w,file=sys.stderr);sys.exit({FETCH_FAILED_EXIT})",
        # The document; what the style delivers, nothing else of it; the argv
        ";".join(apply),
        # The user's program replaces the bootstrap
        "try:os.execvp(a[0],a)",
        "except OSError as x:sys.exit(c+'run %s: %s'%(a[0],x))",
    ]


def program(style: ClusterSpecStyle) -> str:
    """The bootstrap of a job of ``style``."""
    return "\n".join(_lines(with_tf_config(style), with_flags(style))) + "\n"


BOOTSTRAPS = {style: program(style) for style in ClusterSpecStyle}


def bootstrap_argv(style: ClusterSpecStyle, argv: tuple[str, ...]) -> tuple[str, ...]:
    """The command of a task whose cluster is fetched: the bootstrap of its job's style, then
    its own argv."""
    return (INTERPRETER, "-c", BOOTSTRAPS[style], *argv)


def program_env(env: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """A launch's environment (``env``, sorted) as its program gets it from the bootstrap, less
    the fetched ``TF_CONFIG``: no ``FETCH_ENV``, the variables it carries set back. What a
    fetching task's health check runs with."""
    packed = dict(env).get(FETCH_ENV)
    if packed is None:
        return env
    kept = [(k, v) for k, v in env if k != FETCH_ENV]
    return tuple(sorted([*kept, *zip(IDENTITY_ENV, packed.split()[2:], strict=False)]))


def fetch_value(key: str, url: str, identity: tuple[str, ...] = ()) -> str:
    """``$TFDECLARE`` of a task: its key, the URL it fetches, then the values of the
    variables ``IDENTITY_ENV`` (all four or none; none of these has a space)."""
    return " ".join((key, url, *identity))
