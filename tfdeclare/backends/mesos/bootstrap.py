"""The fixed bootstrap a task runs when its cluster is delivered out of band (``clusterwire``).

The task's command becomes ``python3 -c BOOTSTRAP ARGV...``: ``BOOTSTRAP`` is the same text for
every task of every job (no user string is ever put into code; the user's argv stays a list of
arguments, never parsed by a shell or by Python). It needs only ``python3`` (3.6 or later, the
standard library) on the agent or in the image, which TensorFlow's images have. It:

1. GETs ``$TFDECLARE_CLUSTER_URL`` (the framework's cluster server, with the task's name and
   its generation's token in the query), bypassing any proxy of the environment, each try
   bounded (10 s), answers bounded (16 MiB), retrying while the server is unreachable or busy
   (``FETCH_TRIES`` tries ``FETCH_PAUSE_S`` apart: 2 to 12 minutes); a 403 or 404 (a stale
   or wrong token, a task the generation did not launch) ends the tries;
2. on failure writes ``tfdeclare: cannot fetch the cluster: WHY`` to stderr and exits
   with ``FETCH_FAILED_EXIT``;
3. otherwise sets the served environment (``TF_CONFIG``, exactly the bytes it would have had
   in band; the URL's variable was removed at the start, so the program never sees the
   token), replaces ``{ps_hosts}``, ``{worker_hosts}``, ``{job_name}`` and ``{task_index}``
   in the argv when served legacy flags (one placeholder after the other: the same result as
   ``tfdeclare.core.run.clusterspec.substitute``'s single pass, since no value holds a
   brace), and ``os.execvp``'s the argv: the user's program replaces the bootstrap (same pid,
   signals and exit status its own; a program that cannot be executed ends it with
   ``tfdeclare: cannot run PROGRAM: ...``, exit 1).

The bootstrap is short on purpose (it travels in every TaskInfo: ``bench/wire_bench.py``).
"""

from __future__ import annotations

FETCH_TRIES = 60
FETCH_PAUSE_S = 2
FETCH_FAILED_EXIT = 86  # the bootstrap could not fetch the task's cluster (never the program's)
URL_ENV = "TFDECLARE_CLUSTER_URL"
INTERPRETER = "python3"

# One line per statement, as short as it reads: it travels in every TaskInfo.
BOOTSTRAP = f"""\
import json,os,sys,time,urllib.request as u
e=os.environ;a=sys.argv[1:];q=e.pop('{URL_ENV}');o=u.build_opener(u.ProxyHandler({{}}))
for n in range({FETCH_TRIES}):
 try:d=json.loads(o.open(q,timeout=10).read(1<<24));break
 except Exception as x:
  if getattr(x,'code',0)in(403,404)or n>{FETCH_TRIES - 2}:
   sys.stderr.write('tfdeclare: cannot fetch the cluster: %s\\n'%x);sys.exit({FETCH_FAILED_EXIT})
  time.sleep({FETCH_PAUSE_S})
e.update(d.get('env',{{}}))
for k,v in d.get('flags',{{}}).items():a=[s.replace('{{%s}}'%k,v)for s in a]
try:os.execvp(a[0],a)
except OSError as x:sys.exit('tfdeclare: cannot run %s: %s'%(a[0],x))
"""


def bootstrap_argv(argv: tuple[str, ...]) -> tuple[str, ...]:
    """The command of a task whose cluster is fetched: the bootstrap, then its own argv."""
    return (INTERPRETER, "-c", BOOTSTRAP, *argv)
