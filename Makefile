# The README's two commands: `make serve` and `make test`. Both set up what they need.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup test test-core bench clean

setup: $(STAMP)

# One virtual environment for everything: the package (editable), test tools, and the
# measurement stack (CPU PyTorch from the machine's local wheel: never plain `torch`).
$(STAMP): pyproject.toml requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e . -r requirements-dev.txt
	touch $(STAMP)

test-core: setup
	$(BIN)/python -m pytest -m "not browser"

test: setup
	$(BIN)/python -m pytest

bench: setup
	$(BIN)/python benchmarks/bench_estimate.py

clean:
	rm -rf $(VENV) build dist _site core/*.egg-info .pytest_cache .hypothesis
