# Two commands set everything up on a fresh machine: `make demo` and `make test`.
# Both create .venv when it is missing (or when the requirements changed): the CLI with its
# `tensorflow` extra (the examples), the pinned test tools and TensorFlow. Installing just the
# CLI is `pip install .` (README, "Install").

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo demo-mesos test lint typecheck layers reference unit chaos fuzz bench bench-git-sync bench-sched bench-preempt bench-progress bench-docker bench-pulls bench-bigjob bench-placement bench-alongside bench-mesos-alongside bench-limits bench-wire images clean venv real-mesos real-mesos-tests

venv: $(STAMP)

$(STAMP): pyproject.toml requirements/dev.txt requirements/tensorflow.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "tfdeclare needs Python 3.11 or newer")'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements/dev.txt -r requirements/tensorflow.txt -e '.[tensorflow]'
	touch $(STAMP)

TFD := $(VENV)/bin/tfdeclare

# Trains the example jobs of specs/ on this machine (local backend), then shows their status
# and how to look at them. The demo uses the default folders (./.tfdeclare for state, ./status
# for status files), so that `tfdeclare status` and `tfdeclare logs NAME` run here afterwards
# show its jobs with no option to remember. Each run starts from scratch: the demo's own jobs
# (those specs/ names) are deleted first; other jobs in these folders are left alone.
demo: $(STAMP)
	@jobs="$$($(TFD) validate specs -o json | $(PY) -c 'import json, sys; print(*json.load(sys.stdin)["jobs"])')" \
	&& set -- $$jobs \
	&& $(TFD) delete --ignore-not-found "$$@" \
	&& { $(TFD) apply specs --wait --timeout 900; applied=$$?; \
	$(TFD) status; \
	echo; \
	echo "The demo's jobs ($$*) are in .tfdeclare/ and status/ here, tfdeclare's defaults. To look at them:"; \
	echo "  $(TFD) status"; \
	echo "  $(TFD) status $$1"; \
	echo "  $(TFD) logs $$1"; \
	echo "  $(TFD) logs $$1 --task worker-0"; \
	echo "To remove them: $(TFD) delete $$*"; \
	exit $$applied; }

# The same jobs on the Mesos backend, without a cluster: the master emulator runs in the
# background (two agents on this machine, real TensorFlow tasks), the jobs train to the end,
# their status is shown and the emulator is stopped, also on failure (tests/demo_mesos.py).
demo-mesos: $(STAMP)
	$(PY) -m tests.demo_mesos

# ruff refuses functions of complexity 20 or more (C901, pyproject.toml); the few older ones
# marked `# noqa: C901` are a ceiling that only goes down: at most 8.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	@n=$$(grep -rl --include='*.py' 'noqa: C901' tfdeclare tests bench tools | xargs -r grep -c 'noqa: C901' | awk -F: '{s += $$NF} END {print s + 0}'); \
	test "$$n" -le 8 || { echo "$$n functions marked noqa: C901 (complexity 20 or more): at most 8"; exit 1; }

typecheck: $(STAMP)
	$(VENV)/bin/mypy

layers: $(STAMP)
	$(VENV)/bin/lint-imports

# Rewrites the generated parts of docs/reference.md (commands from the parser, fields from the
# schemas, runtime error codes from tfdeclare/core/errors.py); tests/test_reference.py fails while the page and the code disagree.
reference: $(STAMP)
	$(PY) -m tfdeclare.cli.reference

# Both run the tests on TEST_WORKERS processes (pytest-xdist; much of a test's time is waiting
# on sockets, timers and processes, so more workers than cores pays: docs/benchmarks.md, issue
# 23). TEST_WORKERS=0 runs them in this one process. --dist loadgroup keeps the tests of one
# xdist_group (tests/conftest.py: those that share something outside the process) on one worker.
TEST_WORKERS ?= 4
XDIST := -n $(TEST_WORKERS) --dist loadgroup

# The fast tests only: no TensorFlow, no real jobs through the CLI, no waiting on processes or
# timers (markers tf, e2e, slow in pyproject.toml). Well under a minute.
unit: $(STAMP)
	$(VENV)/bin/pytest -m 'not tf and not slow and not e2e' -q $(XDIST)

test: lint typecheck layers
	$(VENV)/bin/pytest -q $(XDIST)

# Issue 12's proof, long versions (make test runs short seeded ones): controllers killed with
# SIGKILL at random points amid faults, on both backends (docs/robustness.md), and the loader
# and planner fed generated specs and raw bytes.
CHAOS_ITERATIONS ?= 100
CHAOS_SEED ?= 12
FUZZ_EXAMPLES ?= 10000

chaos: $(STAMP)
	$(PY) -m tests.chaos --backend local --iterations $(CHAOS_ITERATIONS) --seed $(CHAOS_SEED)
	$(PY) -m tests.chaos --backend mesos --iterations $(CHAOS_ITERATIONS) --seed $(CHAOS_SEED)

fuzz: $(STAMP)
	TFDECLARE_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(VENV)/bin/pytest -q -p no:cacheprovider --timeout 0 tests/test_fuzz_specs.py

bench: $(STAMP)
	$(PY) -m bench

# Issue 31: in git mode a commit that restarts a job, announced by POST /sync -> its first new
# task started (no settle time in git mode; target 1 s). Also part of `make bench`.
bench-git-sync: $(STAMP)
	$(PY) -m bench.daemon_bench --only git-sync

# Scheduling quality (issue 14): a seeded discrete-event simulation of the Mesos backend's own
# queue and placement against a TFMesos-style greedy baseline and plain FIFO, on synthetic
# GPU-cluster traces, and preemption modes on a trace with two priority classes. Writes
# bench/out/sched.json, sched.md and sched-*.png (about 5 minutes).
bench-sched: $(STAMP)
	$(PY) -m bench.sched

# Issue 34's real run: apply of a high-priority job where low-priority jobs fill the capacity
# -> every task of it running (goal: the victims' grace + 5 s), on the local backend (apply
# with the background controller, and the daemon) and on the master emulator: real processes,
# no TensorFlow (bench/preempt_bench.py; bench/out/preempt.md and preempt.json; about 4 minutes).
bench-preempt: $(STAMP)
	$(PY) -m bench.preempt_bench $(if $(RUNS),--runs $(RUNS))

# Issue 34: what one look at a job's progress files costs (shell/progressfiles.py).
bench-progress: $(STAMP)
	$(PY) -m bench.progress_bench

# Issue 23's figures. One big job (apply of N workers that cannot be placed, then a resize by
# one): per-task time and memory; Mesos placement over 1,000-10,000 agents beside a long-lived
# heap; the core's benchmarks. With AGAINST=DIR (another checkout, e.g. a `git worktree` of the
# commit to compare with) each is measured alongside that code and reported as ratios.
bench-bigjob: $(STAMP)
	$(PY) -m bench.bigjob_bench $(if $(AGAINST),--against $(AGAINST))

bench-placement: $(STAMP)
	$(PY) -m bench.placement_bench $(if $(AGAINST),--against $(AGAINST))

bench-alongside: $(STAMP)
	$(PY) -m bench.alongside --against $(AGAINST)

# Issue 29: at the policy's own limits. One job of 100,000 workers and 3,000 jobs in one
# folder (local backend, unschedulable): apply, status, delete, the daemon's page and /jobs
# (bench/limits_bench.py; bench/out/limits.md and limits.json; about 10 minutes, RUNS=1 fewer).
bench-limits: $(STAMP)
	$(PY) -m bench.limits_bench $(if $(RUNS),--runs $(RUNS))

# The Mesos backend end to end (10,000 tasks, 1,000 agents) for this checkout and AGAINST=DIR,
# round by round (issue 23: its policies as a pure reducer must not cost the loop more).
bench-mesos-alongside: $(STAMP)
	$(PY) -m bench.mesos_alongside --against $(AGAINST)

# Issue 33, item 2: the bytes of one task's TaskInfo by its job's size, the cluster in band and
# fetched (mesos.clusterServer); no cluster needed. The agents' fork rate on the real tier:
# python -m bench.framework_bench --tasks 1000 --also-fetch (needs make real-mesos).
bench-wire: $(STAMP)
	$(PY) -m bench.wire_bench --style all

# Issue 13's targets for the local backend's Docker runtime (needs an engine; tests/docker_env.py
# finds or starts one): bench/out/docker.md and docker.json.
bench-docker: $(STAMP)
	$(PY) -m bench --only docker --out docker $(if $(QUICK),--quick)

# Issue 29: apply to job B running while job A's image pulls from a slow registry (needs an
# engine), taking turns with AGAINST=DIR (a checkout of another commit) when given:
# bench/out/pulls.md and pulls.json.
bench-pulls: $(STAMP)
	PULLS_AGAINST=$(AGAINST) $(PY) -m bench --only pulls --out pulls $(if $(QUICK),--quick)

# The training images of images/, built by the Docker engine (DOCKER_HOST or the default socket)
# through tools/build_images.py: make images [IMAGES=tf-cpu] [BASE=IMAGE] [CA_FILE=PEM]
images: $(STAMP)
	$(PY) tools/build_images.py $(IMAGES) $(if $(BASE),--base $(BASE)) $(if $(CA_FILE),--ca-file $(CA_FILE))

# A real Apache Mesos 1.11.0 master and agents (issue 21): the mesos.scheduler tarball from
# pip's package index (sha256 pinned) and the small programs of tools/realmesos, built into
# the tests' cache folder (TFDECLARE_TEST_CACHE or ~/.cache/tfdeclare-tests). Needs g++ and
# Debian's libsvn1 libapr1 libsasl2-2 libcurl4 zlib1g (.ci/run installs them as root).
real-mesos: $(STAMP)
	$(PY) tools/realmesos/build.py

# The real-Mesos tier alone (pytest marker real_mesos; each test on a fresh cluster).
real-mesos-tests: real-mesos
	$(VENV)/bin/pytest -m real_mesos -q

clean:
	rm -rf $(VENV) .demo .demo-mesos .pytest_cache .mypy_cache .ruff_cache
