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

# The SDK's package (signoff_client) is built into the signoff distribution from
# clients/signoff-client/src, so `pip install .` alone is the whole product; the folder is
# also the light signoff-client distribution for other tools' environments.
CLIENT := clients/signoff-client

$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(PIP_INSTALL) -e .
	@touch $(RUN_STAMP)

# The dev extra includes the product, so it satisfies `make run` too.
$(STAMP): pyproject.toml | $(BIN)/python
	$(PIP_INSTALL) -e '.[dev]'
	@touch $(STAMP) $(RUN_STAMP)

$(BENCH_STAMP): $(STAMP)
	$(PIP_INSTALL) -e '.[dev,bench]'
	@touch $(BENCH_STAMP)

install: $(STAMP)  ## venv + pip install -e '.[dev]'

run: $(RUN_STAMP)  ## install the product (no dev extra), start it on the example config: http://127.0.0.1:8080/
	$(BIN)/signoff daemon start --config $(CONFIG)

# Tests run on JOBS worker processes (pytest-xdist), a test file per worker at a time:
# most of them wait on a daemon starting, a socket or a browser, so two at once on two
# cores take about half the time of one. JOBS=0 runs them in this process, one by one.
# The soak tests restart or freeze PostgreSQL under everyone's feet: they run after the
# others, alone (pytest's exit status 5, "no test selected", is fine in either pass: a
# PYTEST_ARGS that names only soak tests, or only others).
JOBS ?= 2
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider

test: $(STAMP)  ## the whole test suite (JOBS=2 workers; the soak tests after, alone)
	$(PYTEST) -n $(JOBS) --dist loadfile -m 'not soak' $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(PYTEST) -m soak $(PYTEST_ARGS) || [ $$? -eq 5 ]

# The soak tests (PostgreSQL restarts, frozen nodes, a full disk) read no dates: they run
# once per CI run, in `make test`, not again here.
test-faketime: $(STAMP)  ## the suite with our processes' clock 400 days ahead (needs faketime), soak tests left out
	faketime -f '+400d' $(PYTEST) -n $(JOBS) --dist loadfile -m 'not soak' $(PYTEST_ARGS) || [ $$? -eq 5 ]

lint: $(STAMP)  ## ruff, mypy, the layer contract and the docs site (a broken link fails it)
	$(BIN)/ruff check signoff tests bench docs $(CLIENT)/src
	$(BIN)/mypy
	$(BIN)/lint-imports
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

bench: $(BENCH_STAMP)  ## benchmarks; each prints ratios against a baseline measured in the same run
	@for b in throughput policy flow api pending slack agent approvals waiters cluster masking telemetry signing; do \
	  if [ -f bench/$$b.py ]; then echo "== bench/$$b.py"; $(BIN)/python bench/$$b.py || exit 1; fi; \
	done

clean:
	rm -rf $(VENV) signoff-work test-artifacts site .mypy_cache .ruff_cache
