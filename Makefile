# Two commands for a new user: `make demo` and `make test`. Each creates or
# reuses .venv, installs torch first (TORCH_SPEC; the default is the CPU build,
# set e.g. TORCH_SPEC='torch==2.13.0 --index-url ...' on a GPU machine) so that
# pip never pulls a CUDA build as a side effect, then installs rightsize itself.
# A second run skips the installs: the stamp file is newer than pyproject.toml.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.rightsize-installed
TEST_STAMP := $(VENV)/.rightsize-test-extras

.PHONY: install demo test lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet $(TORCH_SPEC)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# The main job on its embedded defaults: the service (src/rightsize/service/demo.py)
# on a fresh SQLite store, three real jobs submitted to it — one mis-sized and grown,
# one queued behind it, one started from the first one's measured history.
demo: $(STAMP)
	$(BIN)/python -m rightsize.service.demo --dir demo-output

# The tests also need the optional extras the default install leaves out (Ray, for the
# Ray backend's tests on a cluster they start on this host; Optuna, for its driver's).
$(TEST_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,ray,optuna]'
	@touch $(TEST_STAMP)

test: $(TEST_STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

bench: $(STAMP)
	$(BIN)/python benchmarks/plan/compute_model.py --out benchmarks/results/compute_model.json

clean:
	rm -rf $(VENV) demo-output .pytest_cache
