# signoff — the two commands a newcomer needs are `make run` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CONFIG ?= config.example.toml
# Two stamps: `make run` needs the product only; tests, lint and bench need the dev extra.
STAMP := $(VENV)/.installed-dev
RUN_STAMP := $(VENV)/.installed
# Hide setuptools' notice about editable installs (10 lines on every install, nothing to do).
PIP_INSTALL := PYTHONWARNINGS="ignore:Editable installation" $(BIN)/pip install --quiet
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: install run test test-faketime lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# The SDK's distribution is installed with the package: signoff depends on signoff-client,
# which is built from this repo (one source of the SDK, see signoff/client.py).
CLIENT := clients/signoff-client

$(RUN_STAMP): pyproject.toml $(CLIENT)/pyproject.toml | $(BIN)/python
	$(PIP_INSTALL) -e ./$(CLIENT) -e .
	@touch $(RUN_STAMP)

# The dev extra includes the product, so it satisfies `make run` too.
$(STAMP): pyproject.toml $(CLIENT)/pyproject.toml | $(BIN)/python
	$(PIP_INSTALL) -e ./$(CLIENT) -e '.[dev]'
	@touch $(STAMP) $(RUN_STAMP)

$(BENCH_STAMP): $(STAMP)
	$(PIP_INSTALL) -e ./$(CLIENT) -e '.[dev,bench]'
	@touch $(BENCH_STAMP)

install: $(STAMP)  ## venv + pip install -e ./clients/signoff-client -e '.[dev]'

run: $(RUN_STAMP)  ## install the product (no dev extra), start it on the example config: http://127.0.0.1:8080/
	$(BIN)/signoff daemon start --config $(CONFIG)

test: $(STAMP)  ## the whole test suite
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

test-faketime: $(STAMP)  ## the suite with our processes' clock 400 days ahead (needs faketime)
	faketime -f '+400d' $(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

lint: $(STAMP)  ## ruff, mypy and the layer contract
	$(BIN)/ruff check signoff tests bench $(CLIENT)/src
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(BENCH_STAMP)  ## benchmarks; each prints ratios against a baseline measured in the same run
	@for b in throughput policy flow api slack agent approvals cluster masking; do \
	  if [ -f bench/$$b.py ]; then echo "== bench/$$b.py"; $(BIN)/python bench/$$b.py || exit 1; fi; \
	done

clean:
	rm -rf $(VENV) signoff-work test-artifacts .mypy_cache .ruff_cache
