"""The fixed bootstrap a task runs when its cluster is delivered out of band (``clusterwire``).

The task's command becomes ``python3 -c BOOTSTRAP ARGV...``: ``BOOTSTRAP`` is the same text for
every task of every job (no user string is ever put into code; the user's argv stays a list of
arguments, never parsed by a shell or by Python). It needs only ``python3`` (3.6 or later, the
standard library) on the agent or in the image, which TensorFlow's images have.

Its environment holds ``$TFDECLARE_CLUSTER`` (``FETCH_ENV``): ``KEY URL``, the task's own
key (``clusterserver``: derived from its generation's secret, never sent on the wire) and the
URL of the framework's cluster server with the task's token in the query. It:

1. removes that variable (the program never sees the key nor the token), then GETs the URL,
   bypassing any proxy of the environment, each try bounded (10 s), answers bounded (16 MiB),
   retrying while the server is unreachable or busy (``FETCH_TRIES`` tries ``FETCH_PAUSE_S``
   apart: 2 to 12 minutes); a 403 or 404 (a stale or wrong token) ends the tries;
2. checks the answer: its first 32 bytes must be the HMAC-SHA256 under the key of the rest
   (``hmac.compare_digest``), so only the holder of the key (the framework) can answer;
3. on any failure writes ``tfdeclare: cannot fetch the cluster: WHY`` to stderr and exits with
   ``FETCH_FAILED_EXIT`` (``WHY`` is ``not signed by the framework`` for an answer that fails
   the check: whoever answered at that address is not the framework), having applied nothing;
4. otherwise applies only what a task's cluster is: ``TF_CONFIG`` (exactly the bytes it would
   have had in band; no other variable of the answer is ever set) and, in one pass over each
   argument, the four legacy placeholders ``{ps_hosts}``, ``{worker_hosts}``, ``{job_name}``
   and ``{task_index}`` (those the answer holds: ``tfdeclare.core.run.clusterspec.substitute``'s
   result; any other brace stays as written), and ``os.execvp``'s the argv: the user's program
   replaces the bootstrap (same pid, signals and exit status its own; a program that cannot be
   executed ends it with ``tfdeclare: cannot run PROGRAM: ...``, exit 1).

The bootstrap is short on purpose (it travels in every TaskInfo: ``bench/wire_bench.py``), hence
its one-letter names: ``e`` the environment, ``k`` the key, ``q`` the URL, ``b`` the answer, ``w``
``True`` once the answer is checked else why not, ``d`` the document, ``a`` the argv.
"""

from __future__ import annotations

FETCH_TRIES = 60
FETCH_PAUSE_S = 2
FETCH_FAILED_EXIT = 86  # the bootstrap could not fetch the task's cluster (never the program's)
FETCH_ENV = "TFDECLARE_CLUSTER"
INTERPRETER = "python3"
MAC_BYTES = 32  # an answer is the HMAC-SHA256 of the document, then the document
FLAGS = ("ps_hosts", "worker_hosts", "job_name", "task_index")
UNSIGNED = "not signed by the framework"

# One line per statement, as short as it reads: it travels in every TaskInfo.
BOOTSTRAP = f"""\
import hmac,json,os,re,sys,time,urllib.request as u
e=os.environ;k,q=e.pop('{FETCH_ENV}').split();o=u.build_opener(u.ProxyHandler({{}}))
for n in range({FETCH_TRIES}):
 try:b=o.open(q,timeout=10).read(1<<24);w=hmac.compare_digest(b[:{MAC_BYTES}],\
hmac.new(k.encode(),b[{MAC_BYTES}:],'sha256').digest())or'{UNSIGNED}';break
 except Exception as x:
  w=x
  if getattr(x,'code',0)in(403,404):break
  time.sleep({FETCH_PAUSE_S})
if w!=1:sys.stderr.write('tfdeclare: cannot fetch the cluster: %s\\n'%w);sys.exit({FETCH_FAILED_EXIT})
d=json.loads(b[{MAC_BYTES}:])
if'TF_CONFIG'in d:e['TF_CONFIG']=d['TF_CONFIG']
a=[re.sub('{{({"|".join(FLAGS)})}}',lambda m:d.get(m[1],m[0]),s)for s in sys.argv[1:]]
try:os.execvp(a[0],a)
except OSError as x:sys.exit('tfdeclare: cannot run %s: %s'%(a[0],x))
"""


def bootstrap_argv(argv: tuple[str, ...]) -> tuple[str, ...]:
    """The command of a task whose cluster is fetched: the bootstrap, then its own argv."""
    return (INTERPRETER, "-c", BOOTSTRAP, *argv)


def fetch_value(key: str, url: str) -> str:
    """``$TFDECLARE_CLUSTER`` of a task: its key, then the URL it fetches (neither has a space)."""
    return f"{key} {url}"
