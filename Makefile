# The book's commands. `make book` builds the website; `make test` runs every check.
# `make book` creates a light environment (.venv-book, requirements-book.txt: no PyTorch) on
# first use; every other command creates the full one (.venv, requirements.txt).

PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# .venv takes torch from PyTorch's CPU-only index first (from PyPI, the pinned torch is the CUDA
# build on Linux: gigabytes more); the rest of requirements.txt then finds it installed.
# `make venv TORCH_INDEX=` (on a fresh clone) takes PyPI's default build, CUDA on Linux.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
BOOK_VENV  := .venv-book
BOOK_BIN   := $(BOOK_VENV)/bin
BOOK_STAMP := $(BOOK_VENV)/.installed
# The pins need Python 3.11.5 or newer (soupsieve 4 refuses older; Debian 12 ships 3.11.2).
CHECK_PYTHON = $(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11, 5))' 2>/dev/null || \
	{ echo "need Python 3.11.5 or newer as $(PYTHON) (set PYTHON=...)"; exit 1; }
NB     ?= --all
export PYTHONHASHSEED := 0
# Quiet, reproducible notebook kernels: no stray warnings about Jupyter's own paths.
export JUPYTER_PLATFORM_DIRS := 1

.PHONY: help venv book-venv book browser test test-gpu test-portability lint drift unit notebooks site lab execute bench margins release release-tag test-oldest freeze freeze-book clean

help:
	@echo "make book       build the website into _build/html (creates .venv-book on first use)"
	@echo "make test       every check: lint, unit (drift included), notebooks, site"
	@echo "make lab        open the notebooks in JupyterLab"
	@echo "make execute    re-execute notebooks in place and refresh their .py twins (NB=path)"
	@echo "make bench      every notebook executed, times in book/benchmarks.csv (quiet machine)"
	@echo "                WHAT=reverse: chapter 7's time to 99.9% (book/bench_reverse.csv)"
	@echo "                WHAT=decode: chapter 11's decoding step (book/bench_decode.csv)"
	@echo "make margins    a chapter's claims over seeds: CHAPTER=shapes ARGS=\"--part overfit --seeds 3\""
	@echo "make venv       create .venv: requirements.txt, PyTorch's CPU build (TORCH_INDEX= for PyPI's)"
	@echo "make book-venv  create .venv-book: requirements-book.txt, what the website build needs"
	@echo "make lint       ruff on helpers, tests, scripts and the notebook twins; actionlint"
	@echo "make drift      notebook pairing, stored outputs and conventions (tests/test_notebooks.py)"
	@echo "make unit       unit and property tests of helpers"
	@echo "make notebooks  strict nbval: re-execute every notebook, compare outputs (NUMERICS=...)"
	@echo "make test-portability  strict nbval under four numerics configurations"
	@echo "make test-oldest  unit tests and chapters 1-4 on the lowest versions pyproject.toml allows"
	@echo "make test-gpu   every chapter and the unit tests on a CUDA GPU (GPU_PYTHON=python3 ...)"
	@echo "make browser    install Debian's Chromium for the browser tests (when root)"
	@echo "make site       build the website, then check it (pytest -m site, Chromium)"
	@echo "make release VERSION=x.y.z      the new version in every file (CHANGELOG entry first)"
	@echo "make release-tag VERSION=x.y.z  tag the committed release v<version>"
	@echo "make freeze     rewrite requirements.txt from .venv"
	@echo "make freeze-book  rewrite requirements-book.txt: jupyter-book at requirements.txt's pins"
	@echo "make clean      remove _build and the test caches"

$(STAMP): requirements.txt pyproject.toml
	@$(CHECK_PYTHON)
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade "pip>=24"
	$(if $(TORCH_INDEX),$(BIN)/python -m pip install -q --no-deps --retries 1 --timeout 20 \
		--index-url $(TORCH_INDEX) "$$(grep '^torch==' requirements.txt)" || \
		echo "!!! $(TORCH_INDEX) unreachable: torch comes from the default index (on Linux, \
		PyPI's build is the CUDA one); set TORCH_INDEX to a reachable CPU index to avoid that")
	$(BIN)/python -m pip install -q -r requirements.txt
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $(STAMP)

venv: $(STAMP)

# The website is built from the notebooks' stored outputs: jupyter-book only, no PyTorch.
$(BOOK_STAMP): requirements-book.txt
	@$(CHECK_PYTHON)
	test -d $(BOOK_VENV) || $(PYTHON) -m venv $(BOOK_VENV)
	$(BOOK_BIN)/python -m pip install -q --upgrade "pip>=24"
	$(BOOK_BIN)/python -m pip install -q -r requirements-book.txt
	touch $(BOOK_STAMP)

book-venv: $(BOOK_STAMP)

# MathJax, Vega and ONNX Runtime Web are vendored into the site (book/_ext/vendor_assets.py)
# from these pins.
NODE_STAMP := tests/browser/node_modules/.package-lock.json
$(NODE_STAMP): tests/browser/package.json tests/browser/package-lock.json
	npm ci --prefix tests/browser --no-audit --no-fund
	touch $(NODE_STAMP)

# Always the light environment, in `make test` too: the checks then cover the published build.
book: $(BOOK_STAMP) $(NODE_STAMP)
	$(BOOK_BIN)/jupyter-book build . -W -n --keep-going

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
# oneDNN's vector instructions forced down to plain scalar code and one thread per kernel (the
# strictest of the configurations, and no slower: two notebooks run side by side on two cores),
# so a stored output that depends on floating-point bits fails on the machine that wrote it,
# the day it is written.
NUMERICS_scalar  := ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 ONEDNN_MAX_CPU_ISA=SSE41
NUMERICS_avx2    := ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2
NUMERICS_threads := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
# Both at once: a value can pass each of the two alone and still move when they combine.
NUMERICS_scalar_threads := $(NUMERICS_scalar) $(NUMERICS_threads)
NUMERICS ?= scalar_threads

notebooks: $(STAMP)
	@echo "nbval under numerics '$(NUMERICS)': $(NUMERICS_$(NUMERICS))"
	env $(NUMERICS_$(NUMERICS)) $(NBVAL)

# The nbval step under four configurations, one after another (about 5 times `notebooks`).
test-portability: $(STAMP)
	@for config in scalar avx2 threads scalar_threads; do \
		echo "=== nbval under numerics '$$config'"; \
		start=$$(date +%s); \
		$(MAKE) --no-print-directory notebooks NUMERICS=$$config || exit 1; \
		echo "=== '$$config' passed in $$(( $$(date +%s) - start )) s"; \
	done

site: book browser
	$(BIN)/pytest -q -m site tests/

# The lowest versions pyproject.toml allows (scripts/oldest_constraints.py), in .venv-oldest:
# the unit tests, and chapters 1-4 executed with their asserts (nbval-lax: older libraries print
# some outputs differently, so outputs are not compared). PyPI's torch: the CUDA build on Linux
# (about 3 GB), as a reader who installs the floor gets it.
OLDEST_VENV := .venv-oldest
# Not run there: the pinned environments' own checks, the reference model (transformers), and
# the diagrams' byte-for-byte SVGs (each matplotlib version writes its own bytes).
OLDEST_SKIP := --ignore=tests/test_gpt2_parity.py --ignore=tests/test_environments.py \
	--ignore=tests/test_notebooks.py --ignore=tests/test_site.py --ignore=tests/test_browser.py \
	--deselect=tests/test_diagrams.py::test_committed_svg_is_what_the_script_draws
test-oldest:
	@$(CHECK_PYTHON)
	rm -rf $(OLDEST_VENV)
	$(PYTHON) -m venv $(OLDEST_VENV)
	$(OLDEST_VENV)/bin/python -m pip install -q --upgrade "pip>=24"
	$(OLDEST_VENV)/bin/python scripts/oldest_constraints.py > $(OLDEST_VENV)/constraints.txt
	$(OLDEST_VENV)/bin/python -m pip install -q -c $(OLDEST_VENV)/constraints.txt -e . \
		pytest pytest-xdist hypothesis nbval ipykernel pyyaml
	$(OLDEST_VENV)/bin/python -m pip list 2>/dev/null | grep -iE "^(torch|numpy|pandas|matplotlib|seaborn|altair|tqdm|scikit-learn) "
	OMP_NUM_THREADS=1 $(OLDEST_VENV)/bin/pytest -q -m "not site" -n 2 --dist loadfile \
		-p no:cacheprovider $(OLDEST_SKIP)
	OMP_NUM_THREADS=1 $(OLDEST_VENV)/bin/pytest -q --nbval-lax --nbval-current-env -p no:randomly \
		-p no:cacheprovider notebooks/01_*.ipynb notebooks/02_*.ipynb notebooks/03_*.ipynb \
		notebooks/04_*.ipynb

# Every chapter on a CUDA GPU, as a Colab reader with a GPU runs it: each notebook executed top
# to bottom in a Jupyter kernel with all its asserts (nbval-lax: outputs are not compared, a
# GPU's numbers differ from the stored CPU ones in their last bits), GPU_JOBS notebooks at a
# time with OMP_NUM_THREADS set (kernels that each start every CPU thread oversubscribe the
# cores); then the unit tests with the GPU visible. Not part of `make test`: CI has no GPU.
# GPU_PYTHON is a Python whose torch sees CUDA, with the packages of requirements.txt and the
# book's helpers (`make venv TORCH_INDEX=` builds .venv with PyPI's CUDA torch; on a machine
# that has its own CUDA torch: `make test-gpu GPU_PYTHON=python3`).
GPU_PYTHON ?= $(BIN)/python
GPU_JOBS   ?= 3
GPU_SKIP   := --ignore=tests/test_environments.py --ignore=tests/test_site.py \
	--ignore=tests/test_browser.py --ignore=tests/test_notebooks.py
test-gpu:
	@$(GPU_PYTHON) -c "import sys, torch; sys.exit(not torch.cuda.is_available())" 2>/dev/null || { \
		echo "make test-gpu needs a CUDA GPU, and $(GPU_PYTHON) sees none (torch.cuda.is_available()"; \
		echo "is False, or torch is missing): run it where a GPU is, with GPU_PYTHON set to a Python"; \
		echo "whose torch has CUDA. Nothing was tested."; exit 1; }
	$(GPU_PYTHON) -c "import platform, torch; print('GPU:', torch.cuda.get_device_name(), \
		'| torch', torch.__version__, '| Python', platform.python_version())"
	OMP_NUM_THREADS=4 $(GPU_PYTHON) -m pytest -q --nbval-lax --nbval-current-env \
		--nbval-cell-timeout=1200 -p no:randomly -p no:cacheprovider -n $(GPU_JOBS) \
		--dist loadscope notebooks/
	OMP_NUM_THREADS=4 $(GPU_PYTHON) -m pytest -q -m "not site" -p no:cacheprovider \
		-n $(GPU_JOBS) --dist loadfile $(GPU_SKIP) tests/

test: lint unit notebooks site

lab: $(STAMP)
	$(BIN)/jupyter lab notebooks/

execute: $(STAMP)
	$(BIN)/python scripts/execute.py $(NB)

# The one benchmark entry point: each benchmark writes a CSV in book/ (the machine and the command
# in it) that the performance page or a chapter renders. Run it on a quiet machine.
BENCH_book    := $(BIN)/python scripts/execute.py --all --record book/benchmarks.csv
BENCH_reverse := $(BIN)/python scripts/bench_reverse.py --record
BENCH_decode  := OMP_NUM_THREADS=1 $(BIN)/python scripts/bench_decode.py --models chapter \
	gpt2-small --steps 8 --repeats 3 --out book/bench_decode.csv
WHAT ?= book
bench: $(STAMP)
	$(if $(BENCH_$(WHAT)),,$(error make bench WHAT=$(WHAT): choose book, reverse or decode))
	$(BENCH_$(WHAT))

# A chapter's asserted claims over seeds (scripts/margins.py: CHAPTER is encoder, reverse, shapes,
# encoder-decoder, lm, shakespeare, long or digits, or the chapter's number; ARGS its options, `--help` lists them).
# At full scale most parts take hours.
margins: $(STAMP)
	$(if $(CHAPTER),,$(error make margins CHAPTER=...: encoder, reverse, shapes, encoder-decoder, lm, shakespeare, long or digits))
	$(BIN)/python scripts/margins.py $(CHAPTER) $(ARGS)

# A release: write CHANGELOG.md's entry first, then `make release VERSION=x.y.z` (the version in
# every file that names it), `make test`, commit, `make release-tag VERSION=x.y.z`.
release: $(STAMP)
	$(BIN)/python scripts/release.py $(VERSION)

release-tag: $(STAMP)
	$(BIN)/python scripts/release.py $(VERSION) --tag

freeze: $(STAMP)
	$(BIN)/python -m pip freeze --exclude-editable | sed 's/+cpu$$//' > requirements.txt

# Re-resolve the light environment: jupyter-book and its dependencies, constrained to
# requirements.txt's versions (tests/test_environments.py checks the two agree).
freeze-book:
	rm -rf $(BOOK_VENV)
	$(PYTHON) -m venv $(BOOK_VENV)
	$(BOOK_BIN)/python -m pip install -q --upgrade "pip>=24"
	$(BOOK_BIN)/python -m pip install -q -c requirements.txt \
		"$$(grep -i '^jupyter-book==' requirements.txt)"
	{ sed -n '/^#/p' requirements-book.txt; $(BOOK_BIN)/python -m pip freeze; } > requirements-book.tmp
	mv requirements-book.tmp requirements-book.txt
	touch $(BOOK_STAMP)

clean:
	rm -rf _build .pytest_cache .ruff_cache .hypothesis
