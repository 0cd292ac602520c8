# eaglefeed: `make` sets up .venv; `make demo` runs the pipeline end to end; `make test` runs the tests.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

SUDO   := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: all install demo test lint typecheck unit bench bench-quick reliability clean clean-state prometheus engine-env test-engine

all: install

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/pip install --quiet --no-deps specforge==0.2.0  # its JSONL loader, for tests; deps would pull torch
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/eaglefeed demo

# The suite in TEST_WORKERS processes (pytest-xdist; each test file stays on one, with a broker of
# its own), then the tests marked serial alone; then where the time went: the slowest files and
# tests, from the JUnit files they write.
TEST_WORKERS ?= 3
TEST_RESULTS := .eaglefeed/test-results

test: $(STAMP) lint typecheck prometheus
	@mkdir -p $(TEST_RESULTS)
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not serial" --junitxml=$(TEST_RESULTS)/junit.xml; \
	  status=$$?; $(BIN)/pytest -q -m serial --junitxml=$(TEST_RESULTS)/junit-serial.xml || status=1; \
	  $(BIN)/python scripts/test_times.py $(TEST_RESULTS)/junit.xml $(TEST_RESULTS)/junit-serial.xml --top 25; \
	  exit $$status

# The observability test runs a real Prometheus server: Debian's package, installed with apt-get
# (through sudo unless root) when no `prometheus` is on PATH; without it that test is skipped.
prometheus:
	@command -v prometheus >/dev/null || { echo "make test: no prometheus on PATH; installing Debian's" \
	  "prometheus package for the dashboard test: $(strip $(SUDO) apt-get install prometheus)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  ( $(SUDO) apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1 || \
	    { $(SUDO) apt-get update -q >/dev/null && \
	      $(SUDO) apt-get install -y -q --no-install-recommends prometheus >/dev/null; } ) || \
	  echo "could not install prometheus: the dashboard test will be skipped"; }

lint: $(STAMP)
	$(BIN)/ruff check .

# Strict on the whole eaglefeed namespace (pyproject.toml [tool.mypy]).
typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

# Benchmarks print ratios against baselines measured in the same run (docs/BENCHMARKS.md).
bench: $(STAMP)
	$(BIN)/python -m bench.run_all

bench-quick: $(STAMP)
	$(BIN)/python -m bench.run_all --quick

# Kills, broker restarts, SGLang faults, hostile input, a 20000-prompt soak, the cluster scenarios and
# the 10-minute nemesis (docs/RELIABILITY.md).
reliability: $(STAMP)
	$(BIN)/python -m reliability

# vLLM on CPU in its own venv, from a lock (scripts/engine/requirements.lock, 6.3 GB installed).
ENGINE_STAMP := .venv-engine/.installed

engine-env: $(STAMP) $(ENGINE_STAMP)

$(ENGINE_STAMP): scripts/engine/requirements.lock scripts/engine/install.sh
	PYTHON=$(PYTHON) bash scripts/engine/install.sh

# Starts real vLLM servers on a tiny local model; `make test` never does (tests/engine/conftest.py).
test-engine: engine-env
	$(BIN)/pytest -q -m engine tests/engine

# Build artefacts only: the broker's data, the demo's state and progress ledgers stay.
clean:
	rm -rf $(VENV) build dist *.egg-info

# Everything `make demo` and a local broker left here: .eaglefeed/ (the broker's data and the
# demo's state) and demo-data/. Stop the broker first (`eaglefeed broker stop`). Progress
# ledgers live in the cache dir: `rm -rf ~/.cache/eaglefeed/produce` forgets them.
clean-state:
	rm -rf .eaglefeed demo-data
