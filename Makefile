# signoff — the two commands a newcomer needs are `make run` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CONFIG ?= config.example.toml
STAMP := $(VENV)/.installed-dev

.PHONY: install run test test-faketime lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

CLIENT := clients/signoff-client

# The SDK's distribution is installed with the package: signoff depends on signoff-client,
# which is built from this repo (one source of the SDK, see signoff/client.py).
$(STAMP): pyproject.toml $(CLIENT)/pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ./$(CLIENT) -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)  ## venv + pip install -e ./clients/signoff-client -e '.[dev]'

run: $(STAMP)  ## start the daemon on the example config: http://127.0.0.1:8080/
	$(BIN)/signoff daemon start --config $(CONFIG)

test: $(STAMP)  ## the whole test suite
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

test-faketime: $(STAMP)  ## the suite with our processes' clock 400 days ahead (needs faketime)
	faketime -f '+400d' $(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

lint: $(STAMP)  ## ruff, mypy and the layer contract
	$(BIN)/ruff check signoff tests bench $(CLIENT)/src
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(STAMP)  ## benchmarks; each prints ratios against a baseline measured in the same run
	@for b in throughput policy flow api slack approvals; do \
	  if [ -f bench/$$b.py ]; then echo "== bench/$$b.py"; $(BIN)/python bench/$$b.py || exit 1; fi; \
	done

clean:
	rm -rf $(VENV) signoff-work test-artifacts .mypy_cache .ruff_cache
