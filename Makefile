# eaglefeed: `make` sets up .venv; `make demo` runs the pipeline end to end; `make test` runs the tests.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: all install demo test lint unit bench clean

all: install

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/eaglefeed demo

test: $(STAMP) lint
	$(BIN)/pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

bench: $(STAMP)
	$(BIN)/python bench/standin_throughput.py

clean:
	rm -rf $(VENV) demo-data .eaglefeed build *.egg-info
