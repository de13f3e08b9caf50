# Set-up and everyday commands. Each target creates or updates the virtualenv it needs.
#   make quickstart   venv + install + train the quickstart recipe on the embedded dataset
#   make test         venv + test extras + the test suite
# TORCH_SPEC picks the torch version, TORCH_INDEX the index its build comes from
# (make quickstart TORCH_INDEX=https://download.pytorch.org/whl/cu126; .../whl/cpu for a CPU-only build).

PYTHON     ?= python3
VENV       ?= .venv
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
PYTEST_ARGS ?=
# pytest-xdist workers: one per core, at most 4 (most tests start processes that import torch,
# Lightning and PyG; a 2-rank test starts two). PYTEST_WORKERS=0 runs in this process.
PYTEST_WORKERS ?= auto
BIN        := $(VENV)/bin

.PHONY: quickstart test venv clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Re-install when the project metadata changes.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--index-url "$(TORCH_INDEX)")
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $@

venv: $(VENV)/.installed

quickstart: $(VENV)/.installed
	$(BIN)/gnnkit run recipes/quickstart.yaml

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --maxprocesses 4 $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
