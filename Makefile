# The README's two commands: `make serve` and `make test`. Both set up what they need.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup test test-core bench clean site serve bench-site lint-workflows validate-cuda

setup: $(STAMP)

# One virtual environment for everything: the package (editable), test tools, and the
# measurement stack (CPU PyTorch from the machine's local wheel: never plain `torch`).
$(STAMP): pyproject.toml requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e . -r requirements-dev.txt
	touch $(STAMP)

test-core: setup
	$(BIN)/python -m pytest -m "not browser and not slow"

test: setup site lint-workflows
	$(BIN)/python -m pytest

bench: setup
	$(BIN)/python benchmarks/bench_estimate.py

# On a machine with one NVIDIA GPU and `pip install 'trainmem[measure]'` (CUDA torch): measure the
# CUDA cases (scripts/cuda_cases.py, under 8 minutes), append them to the corpus, print predicted vs
# measured. Uses the Python it finds (PYTHON=...), not the CPU-only .venv.
validate-cuda:
	PYTHONPATH=core $(PYTHON) scripts/validate_cuda.py

clean:
	rm -rf $(VENV) build dist _site core/*.egg-info .pytest_cache .hypothesis

# ---------------------------------------------------------------- web calculator
# `make site` builds _site/ (npm ci in web/, the wheels, Pyodide, the pre-rendered page);
# `make serve` builds it and serves it on http://127.0.0.1:$(PORT).
PORT     ?= 8000
NPM_STAMP := web/node_modules/.package-lock.json

$(NPM_STAMP): web/package.json web/package-lock.json
	cd web && npm ci --no-audit --no-fund --loglevel=error
	touch $(NPM_STAMP)

site: setup $(NPM_STAMP)
	$(BIN)/python build_site.py

serve: site
	$(BIN)/python build_site.py --serve --no-build --port $(PORT)

bench-site: site
	$(BIN)/python benchmarks/bench_site.py

# The GitHub workflows: schema-checked (check-jsonschema's bundled schema) and audited (zizmor), offline.
lint-workflows: setup
	$(BIN)/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml
	$(BIN)/zizmor --offline --no-progress .github/workflows
