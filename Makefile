# Two commands set everything up on a fresh machine: `make demo` and `make test`.
# Both create .venv when it is missing (or when the requirements changed).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint typecheck layers unit bench clean venv

venv: $(STAMP)

$(STAMP): pyproject.toml requirements/dev.txt requirements/tensorflow.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "tfdeclare needs Python 3.11 or newer")'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements/dev.txt -r requirements/tensorflow.txt -e .
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m tfdeclare.demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

layers: $(STAMP)
	$(VENV)/bin/lint-imports

unit: $(STAMP)
	$(VENV)/bin/pytest -m 'not tf and not slow' -q

test: lint typecheck layers
	$(VENV)/bin/pytest -q

bench: $(STAMP)
	$(PY) -m bench

clean:
	rm -rf $(VENV) .demo .pytest_cache .mypy_cache .ruff_cache
