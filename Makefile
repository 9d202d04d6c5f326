# The two commands of the course: `make lab` and `make test`. Everything else is a helper.
# The Python of the virtual environment: PYTHON=... when given; else python3.11 (the one CI tests);
# else the newest supported one on PATH (3.12 is reported working, see README).
SUPPORTED_PYTHONS := python3.11 python3.13 python3.12
ifeq ($(origin PYTHON),undefined)
PYTHON := $(or $(firstword $(foreach p,$(SUPPORTED_PYTHONS),$(shell command -v $(p) 2>/dev/null))),python3.11)
endif
VENV ?= .venv
BIN := $(VENV)/bin
# GPU=1 swaps tensorflow-cpu for tensorflow[and-cuda] and adds CuPy and numba-cuda's CUDA libraries
# for the driver's CUDA version (nvidia-smi's "CUDA Version: 13.0"), or for CUDA=12 / CUDA=13.
CUDA ?= $(if $(GPU),$(shell nvidia-smi 2>/dev/null | sed -n -E 's/.*CUDA Version: *([0-9]+)\..*/\1/p' | head -n 1))
# A newer driver runs older CUDA programs: CUDA 14 and later get the cuda13 extra.
CUDA_EXTRA := $(if $(GPU),$(if $(filter 12,$(CUDA)),cuda12,$(if $(CUDA),$(if $(shell [ "$(CUDA)" -ge 13 ] 2>/dev/null && echo y),cuda13,unsupported),unknown)),cpu)
# What a student needs (make lab): the course's runtime for this machine, Caffe's protobuf,
# JupyterLab and Triton (lecture and exercise 23 need it: their kernels run in its interpreter on
# a CPU; on a GPU, PyTorch's CUDA build brings the same triton anyway). The developers add the
# test tools (make test), the website's tools (make site) and Dask (grading on a cluster): about
# 0.4 GB that no student uses.
STUDENT_EXTRAS := $(CUDA_EXTRA),caffe,lab,triton
EXTRAS := $(STUDENT_EXTRAS),dev,site,cluster,postgres
STAMP := $(VENV)/.installed-$(CUDA_EXTRA)
DEV_STAMP := $(VENV)/.installed-$(CUDA_EXTRA)-dev
# The variants install the same `tensorflow` module and CuPy twice: remove the others' on a switch.
OTHER_PACKAGES.cpu := tensorflow cupy-cuda12x cupy-cuda13x
OTHER_PACKAGES.cuda12 := tensorflow-cpu cupy-cuda13x
OTHER_PACKAGES.cuda13 := tensorflow-cpu cupy-cuda12x
# constraints.txt pins numba-cuda's CUDA 13 bindings (cuda-bindings 13 needs a CUDA 13 driver); for
# CUDA 12 the same pins without that line, so numba-cuda[cu12] brings cuda-bindings 12.
CONSTRAINTS := $(if $(filter cuda12,$(CUDA_EXTRA)),$(VENV)/constraints-cuda12.txt,constraints.txt)
# Jupyter refuses to start as root without this flag.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)
# Two pytest workers on two cores: one BLAS/OpenMP thread each, or their thread pools oversubscribe
# the cores and spin (a 64x1000 @ 1000x100 matmul was seen taking 21-70 ms instead of 0.3 ms).
# Bytecode written even where the machine sets PYTHONDONTWRITEBYTECODE (an empty value unsets it):
# pytest rewrites the asserts of 277 test modules in each process that collects them (9 CPU-s
# of its 16 on 2 cores, 2026-12-05) and keeps the result only where it may write it; the test
# helpers and the part files are compiled once instead of in every process that imports them.
# The grading sandbox sets it again for the notebooks it runs.
TEST_ENV := OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=
PYTEST_NOTEBOOK_FLAGS := --nbval-lax --nbval-current-env -p no:randomly -p nbval_kernel_retry
# tests/notebooks/test_browser.py drives Debian's Chromium through Playwright; nothing downloads a browser.
CHROMIUM := /usr/bin/chromium
# Only the folders that hold notebooks: pytest on a folder without any would collect nothing.
NOTEBOOK_DIRS := $(foreach d,lectures solutions,$(if $(shell find $(d) -name '*.ipynb' \
	-not -path '*/.ipynb_checkpoints/*' 2>/dev/null | head -n 1),$(d)/))

.PHONY: install install-dev lab test test-fast test-notebooks notebooks lint typecheck bench bench-gpu \
	constraints clean site system-deps test-unprivileged test-timing-under-load

# pip install of the course with the given extras, the lines about packages already there left out
# (the developers' step would list some 200); pipefail keeps pip's own exit status.
# pip says nothing while it unpacks (a minute for the student's packages): a line every 30 s says
# it is still at work. pip byte-compiles what it installs one file at a time (about 55 of the
# student's 110 s on 2 cores, 2026-12-04); COMPILE does it afterwards on every core instead (38 s
# on 2). Compiled they must be: a sandboxed kernel reads the environment read-only, and would
# compile IPython, NumPy and the rest again in every graded notebook.
# uv, where it could be installed, unpacks the same locked packages in parallel: the student's in
# 11 s against pip's 60 (2026-12-04, 2 cores, the same versions to the last package). It reads no
# pip.conf: edu_dl/util/pip_sources.py gives it pip's sources (a local index, a folder of wheels).
# Where uv is missing, pip installs as before. Neither compiles (COMPILE does, after).
PIP_INSTALL = bash -o pipefail -c 'installer=pip; [ -x $(BIN)/uv ] && installer=uv; \
	while sleep 30; do echo "  ... $$installer is still at work ($$SECONDS s)"; done & \
	trap "kill $$!" EXIT; if [ $$installer = uv ]; then $(BIN)/uv pip install \
	--python $(BIN)/python $$($(BIN)/python edu_dl/util/pip_sources.py) -c $(CONSTRAINTS) \
	-e ".[$(1)]"; else $(BIN)/python -m pip install -c $(CONSTRAINTS) -e ".[$(1)]" \
	--no-compile --progress-bar raw | { grep -v -E "^Requirement already satisfied" || true; }; fi'
UV_VERSION := 0.13.9
# Byte-compiles the .py files under site-packages whose bytecode is missing or stale, on every
# core (edu_dl/util/uncompiled.py --compile: compileall's own step for each file). It finds them
# from each file's bytecode header: a list of the files newer than the last install's stamp
# missed everything uv linked from its cache (their times are the cache's), so the developers'
# extras were never compiled, and where PYTHONDONTWRITEBYTECODE is set every process compiled
# them again. A file meant for a newer Python (torch's py312_intrinsics.py under 3.11) fails and
# stays as it is, as pip leaves it. The packages' own tests/ folders (3,090 files, 45 MB of
# SymPy's, SciPy's, Numba's...) are left out: nothing imports them (all of site-packages took
# 40 s on 2 cores, 29 to 33 s without them, 2026-12-04).
COMPILE = $(BIN)/python edu_dl/util/uncompiled.py --compile
# Measured for the README: a first `make lab` from a warm package cache on 2 cores (issue 36),
# Triton included (2026-12-04: 72 s, 4.2 GB, uv's own cache cold; with pip 91 s, and 98 s before
# the packages were compiled on every core).
STUDENT_INSTALL_COST := about 4.2 GB and 1-1.5 minutes (plus the downloads on a first machine)

install: $(STAMP)
install-dev: $(DEV_STAMP)

# Reinstalls whenever pyproject.toml or constraints.txt is newer than the stamp. Each step says
# what it does and how long it takes; pip lists every package as it goes (--progress-bar raw
# prints a download's progress as lines, so a log shows it too). The times are those of a first
# install on 2 cores from a warm package cache; a cold cache adds the downloads.
$(STAMP): pyproject.toml constraints.txt edu_dl/util/triton_first.py edu_dl/util/no_iri_grammars.py \
	edu_dl/util/pip_sources.py
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; the course needs \
	Python 3.11, 3.12 or 3.13 (or run: make $(MAKECMDGOALS) PYTHON=/path/to/python3.x)" >&2; exit 1; }
	@case "$(CUDA_EXTRA)" in unknown) echo "error: GPU=1 but nvidia-smi reports no CUDA version; \
	give it: make $(MAKECMDGOALS) GPU=1 CUDA=12 (or CUDA=13)" >&2; exit 1;; unsupported) echo \
	"error: CUDA=$(CUDA): the course's GPU extras are for CUDA 12 and 13" >&2; exit 1;; esac
	@echo "[install 1/3] the virtual environment $(VENV) and an up-to-date pip (seconds)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "uv==$(UV_VERSION)" || echo "uv could not be installed: \
	pip installs the packages instead (a few minutes)"
	@others=$$(ls $(VENV)/.installed-* 2>/dev/null | grep -v -x -F -e '$(STAMP)' -e '$(DEV_STAMP)'); \
	if [ -n "$$others" ]; then \
		echo "[install 2/3] removing the other variant's packages: $(OTHER_PACKAGES.$(CUDA_EXTRA))"; \
		echo "$(BIN)/python -m pip uninstall --quiet --yes $(OTHER_PACKAGES.$(CUDA_EXTRA))"; \
		$(BIN)/python -m pip uninstall --quiet --yes $(OTHER_PACKAGES.$(CUDA_EXTRA)); \
	else echo "[install 2/3] no other variant to remove"; fi
	$(if $(filter cuda12,$(CUDA_EXTRA)),grep -v -i -E '^cuda[-_]bindings==' constraints.txt > $(CONSTRAINTS))
	@echo "[install 3/3] the course with PyTorch, TensorFlow, JAX and JupyterLab ($(STUDENT_EXTRAS)): \
	$(STUDENT_INSTALL_COST) the first time, seconds after that"
	$(call PIP_INSTALL,$(STUDENT_EXTRAS))
	@echo "[install] byte-compiling the packages on every core (about 40 s on 2 cores the first time)"
	$(COMPILE)
	@# The course's own package too: the grading sandbox sees it read-only, so without its bytecode
	@# every sandboxed notebook run compiled it again (0.15 s of CPU each, 2026-12-04); 0.3 s here.
	$(BIN)/python -m compileall -q -q -j 0 edu_dl
	@# Triton before TensorFlow in every Python of the environment (edu_dl/util/triton_first.py: why)
	$(BIN)/python edu_dl/util/triton_first.py
	@# jsonschema without rfc3987_syntax's grammars (edu_dl/util/no_iri_grammars.py: why)
	$(BIN)/python edu_dl/util/no_iri_grammars.py
	rm -f $(VENV)/.installed-*
	touch $@

# The developers' tools on top of the student's environment: test tools, website, Dask.
$(DEV_STAMP): $(STAMP)
	@echo "[install] the developers' tools (dev, site, cluster, postgres: pytest, mypy, Sphinx, \
	Dask, Playwright, psycopg): about 0.4 GB, 1-2 minutes the first time"
	$(call PIP_INSTALL,$(EXTRAS))
	@echo "[install] byte-compiling what that added"
	$(COMPILE)
	touch $@

# JupyterLab as the course sets it up in lab/: on the repository root, so that the file browser
# shows lectures/ and exercises/ side by side and terminals start there; its settings
# (lab/overrides.json: no announcements, no update checks), copied where JupyterLab reads
# overrides; the virtual environment first on PATH for the server, its kernels and its terminals
# (lab/jupyter_server_config.py), so that `edu-dl validate` works in a terminal. LAB_ARGS=...
# passes more options to JupyterLab.
LAB_OVERRIDES := $(VENV)/share/jupyter/lab/settings/overrides.json
$(LAB_OVERRIDES): lab/overrides.json
	mkdir -p $(dir $@)
	cp lab/overrides.json $@

lab: install $(LAB_OVERRIDES)
	PATH="$(abspath $(BIN)):$$PATH" VIRTUAL_ENV="$(abspath $(VENV))" $(BIN)/jupyter lab \
		--ServerApp.root_dir="$(CURDIR)" --config=lab/jupyter_server_config.py $(ROOT_FLAG) $(LAB_ARGS)

# The whole suite: lint, types (the package and the exercise parts side by side) beside the unit
# tests (the slow ones included), then the notebooks beside the ordinary user's pass. Each
# phase is timed (.ci/phase) and the table printed at the end; pytest lists its 25 slowest tests,
# so a test that grows is seen in every run, CI's included.
PHASES := $(VENV)/test-phases.tsv
PHASE := .ci/phase $(PHASES)
# Two workers on CI's two cores. A third filled the time a waiting test leaves a core idle (the
# phase went from 92% to 97% busy) but cost more than it filled: the phase's CPU time rose from
# 1,356 to 1,438 CPU-s though the same run's test cuts had taken about 80 CPU-s off (each worker
# imports the frameworks and collects the suite; three CPU-bound processes share two cores less
# well), and its wall time stayed (736 s against 740; 2026-12-03, fresh clones).
UNIT_WORKERS ?= 2
test: install-dev system-deps
	@rm -f $(PHASES)
	$(PHASE) lint $(BIN)/ruff check edu_dl tests solutions/parts site lab
	@echo "the types, the notebooks and the ordinary user's pass run beside the unit tests;"\
		"their output follows the tests'"
	@types_log=$(VENV)/types.log; notebooks_log=$(VENV)/notebooks.log; \
	ordinary_log=$(VENV)/ordinary-user.log; \
	$(PHASE) types nice -n 19 sh -c '$(BIN)/mypy; lib=$$?; $(BIN)/mypy solutions/parts && \
		[ $$lib = 0 ]' > $$types_log 2>&1 & \
	types=$$!; \
	( $(PHASE) notebooks $(MAKE) --no-print-directory test-notebooks > $$notebooks_log 2>&1; \
	  notebooks=$$?; \
	  $(PHASE) ordinary-user $(MAKE) --no-print-directory test-unprivileged > $$ordinary_log 2>&1; \
	  [ $$? = 0 ] && [ $$notebooks = 0 ] ) & beside=$$!; \
	$(PHASE) unit env $(TEST_ENV) $(BIN)/python -m pytest -n $(UNIT_WORKERS) \
		--durations=25 --junitxml=$(VENV)/unit-tests.xml tests; unit=$$?; \
	wait $$types; typed=$$?; cat $$types_log; \
	$(BIN)/python .ci/cost_by_folder.py $(VENV)/unit-tests.xml; \
	wait $$beside; besides=$$?; cat $$notebooks_log $$ordinary_log; \
	[ $$unit = 0 ] && [ $$typed = 0 ] && [ $$besides = 0 ]
	@$(PHASE) --table

# Beside the unit tests, which leave about 8% of two cores idle (tests waiting on timeouts, a
# sandbox's start, the last long test): the types at the lowest priority, the package and then
# the part files in one cache (the parts then read NumPy's and torch's types from it: 3 CPU-s,
# not the 25 of a cache of their own; 33 CPU-s in all, 2026-12-05), and the notebooks, then the
# ordinary user's pass (alone it kept two cores 72-79% busy: it waits on timeouts and floods
# stopped at their limits). Those two are not niced: their kernels and sandboxes run in sessions
# of their own, which Linux schedules as groups of their own (autogroup), where a niceness set
# here does not reach. Fresh clones on 2 cores, 2026-12-04: with the notebooks and the ordinary
# user's pass side by side after the unit tests, make test took 1,018 s; with the notebooks
# beside the unit tests and the ordinary user after them, 980 s; with both beside them, 917 s
# (the machine 94% busy; the unit tests, 15 minutes, are the longest path). The tests marked
# `timing` hold beside eight busy processes (make test-timing-under-load). Each phase keeps its
# own line in the table, which names the phases that overlapped.

# The sandbox's tests again as an ordinary user (CI runs as root; an instructor may be either).
# A skip fails here: a guarantee that holds only for root must not pass unnoticed. Tests marked
# root_only need root itself (a cgroup the test makes around the grader, the sandbox's uid range):
# the root pass ran them, this pass deselects them and lists them; the fallback they stand in for
# (no cgroup: shm and memfds denied, tmpfs files capped) is tested here instead. As root, the
# user is created and given search permission (an access list) on the folders above the Python;
# run by an ordinary user, `make test` itself was that run.
HOSTILE_TESTS := tests/grading/hostile tests/grading/test_sandbox.py
CI_USER := edu-dl-ci
test-unprivileged: install-dev system-deps
	@if [ "$$(id -u)" != 0 ]; then echo "test-unprivileged: already an ordinary user"; exit 0; fi; \
	set -e; id -u $(CI_USER) >/dev/null 2>&1 || useradd --system --no-create-home \
		--shell /usr/sbin/nologin $(CI_USER); \
	dir=$$($(BIN)/python -c 'import sys; print(sys.base_prefix)'); \
	while [ "$$dir" != / ]; do runuser -u $(CI_USER) -- test -x "$$dir" || \
		setfacl -m u:$(CI_USER):x "$$dir"; dir=$$(dirname "$$dir"); done; \
	home=$$(mktemp -d /tmp/edu-dl-ci-home.XXXXXX); chown $(CI_USER) "$$home"; \
	echo "root-only tests (run as root by make test), deselected in this pass:"; \
	$(BIN)/python -m pytest -p no:cacheprovider --collect-only -q -m root_only $(HOSTILE_TESTS) \
		| grep '::' | sed 's/^/  /'; \
	echo "pytest $(HOSTILE_TESTS) as $(CI_USER) (uid $$(id -u $(CI_USER))), skips forbidden"; \
	runuser -u $(CI_USER) -- env HOME="$$home" EDU_DL_FORBID_SKIPS=1 $(TEST_ENV) \
		$(BIN)/python -m pytest -p no:cacheprovider -n 2 -m "not root_only" $(HOSTILE_TESTS); \
	rm -rf "$$home"

# The edit-test loop, a few minutes on 2 cores: no sandboxed batch, no notebook run, no browser
# and nothing marked slow (the markers: tests/conftest.py, tests/README.md). make test runs all.
test-fast: install-dev
	$(TEST_ENV) $(BIN)/python -m pytest -n 2 -m "not slow and not sandbox and not notebook and not browser" tests

# The check of the check (issue 43): the tests marked `timing` (a verdict that rests on time),
# three times in a row beside eight CPU-bound processes, which are stopped afterwards.
LOAD_PROCESSES ?= 8
test-timing-under-load: install-dev
	@pids=""; trap 'kill $$pids 2>/dev/null' EXIT INT TERM; \
	for i in $$(seq $(LOAD_PROCESSES)); do python3 -c 'while True: pass' & pids="$$pids $$!"; done; \
	for run in 1 2 3; do echo "run $$run of 3 beside $(LOAD_PROCESSES) busy processes"; \
		$(TEST_ENV) $(BIN)/python -m pytest -p no:randomly -m timing tests || exit 1; done

# Progress bars print rates that differ on every run: TQDM_DISABLE=1 turns tqdm off.
# Two workers, each notebook whole on one of them (nbval needs --dist loadscope: one kernel per
# notebook); on 2 cores the 11 lectures then took 98-107 s this way against 124-136 s in one process.
# nbval_kernel_retry (tests/notebooks) starts a kernel again that died starting (a port race).
test-notebooks: install-dev
ifeq ($(strip $(NOTEBOOK_DIRS)),)
	@echo "no notebooks yet"
else
	TQDM_DISABLE=1 PYTHONPATH=tests/notebooks $(TEST_ENV) $(BIN)/python -m pytest $(PYTEST_NOTEBOOK_FLAGS) -n 2 --dist loadscope --durations=10 \
		--junitxml=$(VENV)/notebook-tests.xml $(NOTEBOOK_DIRS)
	@$(BIN)/python .ci/cost_by_folder.py --notebooks $(VENV)/notebook-tests.xml
endif

# Execute notebooks in place, as they are committed (NB=... for some only): no per-cell timestamps
# and no widget state (they differ on every run), and in each notebook's metadata a digest of the
# course code it ran, which tests/notebooks/test_notebook_freshness.py compares with today's code.
NB ?= lectures/*.ipynb solutions/*.ipynb
notebooks: install-dev
	TQDM_DISABLE=1 $(BIN)/python -m edu_dl.notebook.run $(NB)

# The course website: the executed lectures and the exercises as static HTML in site/_build/html
# (site/build.py, Sphinx with MyST-NB: the committed outputs, nothing executed or fetched).
# .github/workflows/site.yml publishes the same build to GitHub Pages.
site: install-dev
	$(BIN)/python site/build.py

# System packages the tests use: Debian's Chromium (tests/notebooks/test_browser.py, driven by Playwright;
# nothing downloads a browser), bubblewrap (the grading sandbox) and acl (setfacl, for the run as
# an ordinary user). Installed with apt-get when
# missing and run as root (as in CI); otherwise a message says how.
# postgresql: the gradebook's test against a real server (tests/grading/test_gradebook_db.py);
# Debian puts pg_ctl under /usr/lib/postgresql/<version>/bin, pg_ctlcluster on the PATH.
SYSTEM_PACKAGES := chromium:$(CHROMIUM) bubblewrap:/usr/bin/bwrap acl:/usr/bin/setfacl \
	postgresql:/usr/bin/pg_ctlcluster
system-deps:
	@missing=""; for pair in $(SYSTEM_PACKAGES); do \
		[ -x "$${pair#*:}" ] || missing="$$missing $${pair%%:*}"; done; \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "apt-get install$$missing (for the browser test, the grading sandbox and the gradebook database)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing \
			>/dev/null || { echo "error: apt-get could not install$$missing" >&2; exit 1; }; \
	else \
		echo "note: missing$$missing; install with: sudo apt-get install -y$$missing"; \
	fi

lint: install-dev
	$(BIN)/ruff check edu_dl tests solutions/parts site lab

typecheck: install-dev
	$(BIN)/mypy
	$(BIN)/mypy solutions/parts  # the course's part files: beside the source, not in the package

# As benchmarks/cpu/engine.md was made: one thread per worker keeps a 2-core machine's timings
# honest; 25 interleaved repeats in 5 rounds of fresh processes keep results steady on a noisy
# shared VM. Then benchmarks/RESULTS.md is written from the CPU and the recorded GPU results.
bench: install-dev
	$(BIN)/edu-dl bench engine --threads 1 --repeats 25 --processes 5 --out benchmarks/cpu
	$(BIN)/edu-dl bench plan --threads 1 --repeats 25 --processes 5 --out benchmarks/cpu
	$(BIN)/edu-dl bench conv --out benchmarks/cpu
	$(BIN)/edu-dl bench results

# Every GPU benchmark, in under 8 minutes, into benchmarks/gpu/<device>/ with its PROVENANCE; on a
# machine without a GPU it says so in one sentence and fails. It uses the environment as installed
# (`make install GPU=1`): depending on `install` would switch a GPU environment back to the CPU's.
bench-gpu:
	@test -x $(BIN)/edu-dl || { echo "error: no environment yet: run make install GPU=1" >&2; exit 1; }
	$(BIN)/edu-dl bench gpu --out benchmarks/gpu
	$(BIN)/edu-dl bench results

# Re-record the pinned versions after an upgrade (see site/developers.md). Local labels such as torch's
# `+cpu` are dropped (`torch==2.13.0` still matches the CPU build, and lets a GPU build in);
# `tensorflow` is pinned to the version of `tensorflow-cpu`, so GPU=1 gets the same TensorFlow.
constraints:
	$(BIN)/python -m pip freeze --exclude-editable \
		| grep -v -i -E '^edu[-_]dl([=@ ]|$$)' \
		| sed -E 's/^([^=]+==[^+]+)\+.*$$/\1/' > constraints.txt.new
	sed -n -E 's/^tensorflow[-_]cpu==(.*)$$/tensorflow==\1/ip' constraints.txt.new > constraints.txt.gpu
	@if grep -q -E '^-e |file:|@ ' constraints.txt.new; then \
		echo "error: constraints would hold a local or editable requirement:" >&2; \
		grep -E '^-e |file:|@ ' constraints.txt.new >&2; \
		rm -f constraints.txt.new constraints.txt.gpu; exit 1; fi
	{ echo "# The versions the committed notebook outputs were made with. Written by make constraints."; \
	  cat constraints.txt.new constraints.txt.gpu | LC_ALL=C sort -f -u; } > constraints.txt
	rm -f constraints.txt.new constraints.txt.gpu

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .hypothesis site/_build
