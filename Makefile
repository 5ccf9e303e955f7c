# Two entry points for a newcomer: `make check` (also CI's) tests, `make demo` runs.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY_PACKAGES := jobgate store serving gateway_server worker_server tests bench tools examples

.PHONY: check demo venv proto test lint typecheck buf-lint clean

check: venv lint typecheck test

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Installs the pinned dependencies; re-runs when the pins or the project change.
$(VENV)/.installed: $(BIN)/python pyproject.toml constraints.txt
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

proto: venv
	$(BIN)/python tools/gen_protos.py

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: venv
	$(BIN)/mypy --strict $(PY_PACKAGES)

# The benchmark of issue 11 (several minutes): figures into bench/RESULTS.md.
.PHONY: bench
bench: venv
	$(BIN)/python -m bench.run --out bench/RESULTS.md

# The console's screenshots in docs/console/, taken by its browser tests.
.PHONY: console-screenshots
console-screenshots: venv
	JOBGATE_CONSOLE_SCREENSHOTS=docs/console $(BIN)/python -m pytest -q -p no:cacheprovider tests/console/browser

test: venv
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

# A job end to end on the embedded store, then on Redis (skipped without redis-server).
demo: venv
	VENV_BIN=$(abspath $(BIN)) bash scripts/quickstart.sh

buf-lint:
	npx --yes @bufbuild/buf lint

clean:
	rm -rf $(VENV)
