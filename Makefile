# The two commands of the course: `make lab` and `make test`. Everything else is a helper.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
# GPU=1 swaps tensorflow-cpu for tensorflow[and-cuda] and adds CuPy.
EXTRAS := $(if $(GPU),gpu,cpu),dev
STAMP := $(VENV)/.installed-$(if $(GPU),gpu,cpu)
# Jupyter refuses to start as root without this flag.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)
PYTEST_NOTEBOOK_FLAGS := --nbval-lax --nbval-current-env -p no:randomly

.PHONY: install lab test test-fast test-notebooks lint typecheck bench constraints clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[$(EXTRAS)]"
	rm -f $(VENV)/.installed-*
	touch $@

lab: install
	$(BIN)/jupyter lab lectures/ $(ROOT_FLAG)

# The whole suite: lint, types, unit tests, then the notebooks.
test: install
	$(BIN)/ruff check edu_dl tests
	$(BIN)/mypy
	$(BIN)/python -m pytest -n 2 tests
	$(MAKE) --no-print-directory test-notebooks

test-fast: install
	$(BIN)/python -m pytest -n 2 -m "not slow" tests

test-notebooks: install
	@if ls lectures/*.ipynb solutions/*.ipynb >/dev/null 2>&1; then \
		$(BIN)/python -m pytest $(PYTEST_NOTEBOOK_FLAGS) lectures/ solutions/; \
	else echo "no notebooks yet"; fi

lint: install
	$(BIN)/ruff check edu_dl tests

typecheck: install
	$(BIN)/mypy

bench: install
	$(BIN)/edu-dl bench engine --out benchmarks/RESULTS.md

# Re-record the pinned versions after an upgrade (see README).
constraints:
	$(BIN)/python -m pip freeze --exclude-editable | grep -v '^edu-dl' > constraints.txt

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .hypothesis
