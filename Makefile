# The book's commands. `make book` builds the website; `make test` runs every check.
# Both create the virtual environment (.venv) from the pinned requirements on first use.

PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
NB     ?= --all
export PYTHONHASHSEED := 0
# Quiet, reproducible notebook kernels: no stray warnings about Jupyter's own paths.
export JUPYTER_PLATFORM_DIRS := 1

.PHONY: help venv book browser test test-portability lint drift unit notebooks site lab execute bench freeze clean

help:
	@echo "make book      build the website into _build/html (creates .venv on first use)"
	@echo "make test      every check: lint, pairing drift, unit tests, nbval, book build, site"
	@echo "make test-portability  strict nbval under three numerics configurations"
	@echo "make lab       open the notebooks in JupyterLab"
	@echo "make execute   re-execute notebooks in place and refresh their .py twins (NB=path)"
	@echo "make bench     execute every notebook and print the time each takes"

$(STAMP): requirements.txt pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) (set PYTHON=...)"; exit 1; }
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade "pip>=24"
	$(BIN)/python -m pip install -q -r requirements.txt
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $(STAMP)

venv: $(STAMP)

# MathJax and Vega are vendored into the site (book/_ext/vendor_assets.py) from these pins.
NODE_STAMP := tests/browser/node_modules/.package-lock.json
$(NODE_STAMP): tests/browser/package.json tests/browser/package-lock.json
	npm ci --prefix tests/browser --no-audit --no-fund
	touch $(NODE_STAMP)

book: $(STAMP) $(NODE_STAMP)
	$(BIN)/jupyter-book build . -W -n --keep-going

# The browser tests drive Debian's Chromium; install it when we are root, else say loudly.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } || \
		echo "!!! no Chromium (as root: apt-get install -y chromium): browser tests will be SKIPPED"

lint: $(STAMP)
	$(BIN)/ruff check helpers tests scripts notebooks/*.py
	$(BIN)/ruff format --check helpers tests scripts notebooks/*.py
	$(BIN)/actionlint .github/workflows/*.yml

# Pairing drift, stored outputs and notebook conventions (tests/test_notebooks.py).
drift: $(STAMP)
	$(BIN)/pytest -q tests/test_notebooks.py

# Unit tests: two workers, one file each at a time, one PyTorch thread each (tiny models: more
# threads only fight over the cores; tests/conftest.py also sets it inside the workers).
unit: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/pytest -q -m "not site" -n 2 --dist loadfile

# Strict nbval: every notebook re-executed, its outputs compared with the stored ones.
# Two workers, one notebook each at a time: chapter 8 runs beside the others.
NBVAL = $(BIN)/pytest -q --nbval --nbval-current-env --nbval-cell-timeout=1200 \
	--nbval-sanitize-with tests/nbval_sanitize.cfg -p no:randomly -n 2 --dist loadscope notebooks/
# Numerics configurations (see CONTRIBUTING.md, "Numerics"). Outputs are stored with the
# machine's defaults (`make execute`); `make test` re-executes them with PyTorch's, MKL's and
# oneDNN's vector instructions forced down to plain scalar code, so a stored output that depends
# on floating-point bits fails on the machine that wrote it, the day it is written.
NUMERICS_scalar  := ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 ONEDNN_MAX_CPU_ISA=SSE41
NUMERICS_avx2    := ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2
NUMERICS_threads := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
NUMERICS ?= scalar

notebooks: $(STAMP)
	@echo "nbval under numerics '$(NUMERICS)': $(NUMERICS_$(NUMERICS))"
	env $(NUMERICS_$(NUMERICS)) $(NBVAL)

# The nbval step under three configurations, one after another (about 4 times `notebooks`).
test-portability: $(STAMP)
	@for config in scalar avx2 threads; do \
		echo "=== nbval under numerics '$$config'"; \
		start=$$(date +%s); \
		$(MAKE) --no-print-directory notebooks NUMERICS=$$config || exit 1; \
		echo "=== '$$config' passed in $$(( $$(date +%s) - start )) s"; \
	done

site: book browser
	$(BIN)/pytest -q -m site tests/

test: lint unit notebooks site

lab: $(STAMP)
	$(BIN)/jupyter lab notebooks/

execute: $(STAMP)
	$(BIN)/python scripts/execute.py $(NB)

bench: $(STAMP)
	$(BIN)/python scripts/execute.py --all --record book/benchmarks.csv

freeze: $(STAMP)
	$(BIN)/python -m pip freeze --exclude-editable | sed 's/+cpu$$//' > requirements.txt

clean:
	rm -rf _build .pytest_cache .ruff_cache .hypothesis
