# eaglefeed: `make` sets up .venv; `make demo` runs the pipeline end to end; `make test` runs the tests.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

SUDO   := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: all install demo test lint unit bench bench-quick reliability clean prometheus

all: install

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/eaglefeed demo

test: $(STAMP) lint prometheus
	$(BIN)/pytest -q

# The observability test runs a real Prometheus server: Debian's package.
prometheus:
	@command -v prometheus >/dev/null || { echo "installing Debian's prometheus package"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  ( $(SUDO) apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1 || \
	    { $(SUDO) apt-get update -q >/dev/null && \
	      $(SUDO) apt-get install -y -q --no-install-recommends prometheus >/dev/null; } ) || \
	  echo "could not install prometheus: the dashboard test will be skipped"; }

lint: $(STAMP)
	$(BIN)/ruff check .

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

# Benchmarks print ratios against baselines measured in the same run (docs/BENCHMARKS.md).
bench: $(STAMP)
	$(BIN)/python -m bench.run_all

bench-quick: $(STAMP)
	$(BIN)/python -m bench.run_all --quick

# Kills, broker restarts, SGLang faults, hostile input and a 20000-prompt soak (docs/RELIABILITY.md).
reliability: $(STAMP)
	$(BIN)/python -m reliability

clean:
	rm -rf $(VENV) demo-data .eaglefeed build *.egg-info
