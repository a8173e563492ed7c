# Every target sets up .venv on first use, so a fresh clone needs nothing but Python 3.11+.
#   make lab      the course in JupyterLab (127.0.0.1, token auth), lesson 00 open
#   make instructor  JupyterLab at the course root with nbgrader's formgrader (instructors)
#   make test     the whole test suite (GPU tests skip with a reason without a GPU), a class on a
#                 real JupyterHub end to end included; the files marked `beside` (no folder, port
#                 or file shared, no short time limit) in a second pytest at low priority
#   make test-hub  that JupyterHub test alone (tests/browser/test_jupyterhub.py)
#   make grade    grade your own notebook:  make grade LESSON=00_getting_started
#                 one exercise of it:  make grade LESSON=04_flash_attention EXERCISE=test_softmax_correct
#                 (several: EXERCISE="test_softmax_correct test_softmax_stats")
#   make doctor   versions, GPU facts, measured ceilings, known-bad combinations
#   make cutile   the optional cuTile track's packages (cuda-tile and its toolchain), then doctor
#   make wheelhouse  a folder of wheels for GPU nodes without internet (grader/README.md)
#   make notebooks  rebuild solutions/ from the lesson sources (solutions/*/*.py), then notebooks/
#                 (maintainers; overwrites learner copies)

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
LESSON ?= 00_getting_started

# With an NVIDIA GPU, plain `torch` is the CUDA build and brings the Triton it was built with.
# Without one, torch 2.13.0 and the newest Triton (whose interpreter runs kernels on the CPU);
# add TORCH_INDEX_URL below for PyTorch's CPU-only build. Override: make lab TORCH_SPEC='torch==2.9.1'
HAS_GPU    := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
TORCH_SPEC ?= $(if $(HAS_GPU),torch,torch==2.13.0)
# Set to https://download.pytorch.org/whl/cpu (or a CUDA index) to take torch from PyTorch's index.
TORCH_INDEX_URL ?=
PIP_TORCH_FLAGS := $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL),)

.PHONY: lab instructor test test-hub grade doctor notebooks cutile wheelhouse clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(PIP_TORCH_FLAGS) "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e .
	$(BIN)/python -m tilegym_edu.compat --repair
	touch $@

lab: $(BIN)/.installed
	$(BIN)/tilegym-edu lab

instructor: $(BIN)/.installed
	$(BIN)/tilegym-edu lab --instructor

# The browser tests drive Debian's Chromium with Playwright (never a browser of its own): as
# root the Makefile installs chromium with apt-get; otherwise, without /usr/bin/chromium, those
# tests skip and say how to install it.
$(BIN)/.browser: $(BIN)/.installed
	$(BIN)/python -m pip install --quiet "playwright>=1.40"
	@if [ ! -x /usr/bin/chromium ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	fi
	touch $@

# The sandbox that grades untrusted notebooks (tilegym_edu.sandbox) needs bubblewrap: as root
# the Makefile installs it with apt-get; otherwise the sandbox tests skip and say how.
$(BIN)/.sandbox: $(BIN)/.installed
	@if ! command -v bwrap >/dev/null && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; \
	fi
	touch $@

# ruff lints the package, the tests, the benchmarks and the lessons (configured in pyproject.toml)
$(BIN)/.lint: $(BIN)/.installed
	$(BIN)/python -m pip install --quiet "ruff>=0.6"
	touch $@

# The cluster engine of grade-class (Dask distributed) is an extra; its test runs a local cluster.
$(BIN)/.cluster: $(BIN)/.installed
	$(BIN)/python -m pip install --quiet -e ".[cluster]"
	touch $@

# JupyterHub, and its proxy from the npm registry into .venv/hub-proxy, for the end-to-end test
# of a class on a hub (tests/browser/test_jupyterhub.py: 52-55 s on 2 cores, the install 11 s
# more; part of `make test`, which took 10 min 38 s with it from a fresh clone on 2 cores on
# 2026-12-05, 569 s of it tests, and 14 min 57 s (816 s of tests) later that day on the same
# machine, where one test took 27-33 s alone at both commits: the machine's speed varies; 20 min
# 17 s on 2026-12-03, 23 min 34 s that morning before the lesson grading pool ran in the
# background). Without npm, or where the registry cannot be reached, the install says so and the
# test skips with that reason.
$(BIN)/.hub: $(BIN)/.installed
	$(BIN)/python -m pip install --quiet -e ".[hub]"
	@if ! command -v npm >/dev/null; then \
		echo "npm not found: tests/browser/test_jupyterhub.py will skip (install Node.js and npm)"; \
	elif ! npm install --silent --no-fund --no-audit --prefix $(VENV)/hub-proxy \
			configurable-http-proxy@5; then \
		echo "npm could not install configurable-http-proxy: tests/browser/test_jupyterhub.py will skip"; \
	fi
	touch $@

test: $(BIN)/.installed $(BIN)/.browser $(BIN)/.sandbox $(BIN)/.lint $(BIN)/.cluster $(BIN)/.hub
	$(BIN)/python -m ruff check tilegym_edu tests benchmarks solutions
	@mkdir -p build
	@nice -n 19 $(BIN)/python -m pytest -m beside -p no:cacheprovider > build/test-beside.log 2>&1 & \
	beside=$$!; trap 'kill $$beside 2>/dev/null' INT TERM; \
	$(BIN)/python -m pytest -m "not beside"; rest=$$?; \
	wait $$beside; status=$$?; \
	echo "== pytest -m beside, run beside the rest (build/test-beside.log):"; \
	if [ $$status -eq 0 ]; then tail -n 3 build/test-beside.log; else cat build/test-beside.log; fi; \
	[ $$rest -eq 0 ] && [ $$status -eq 0 ]

test-hub: $(BIN)/.browser $(BIN)/.sandbox $(BIN)/.hub
	$(BIN)/python -m pytest tests/browser/test_jupyterhub.py

# Exits 0 when grading ran, points lost or not (the table says which); tilegym-edu's exit 1,
# "not every point earned", is not a failure of make. A usage or course error (exit 2) is.
grade: $(BIN)/.installed
	$(BIN)/tilegym-edu grade $(LESSON)$(foreach e,$(EXERCISE), --exercise $(e)) || [ $$? -eq 1 ]

doctor: $(BIN)/.installed
	$(BIN)/tilegym-edu doctor

# The optional cuTile track: cuda-tile and the pip toolchain it compiles with, all three at one
# major.minor (cuda.tile finds them only so), the version that ran on an H200; a GPU of compute
# capability 8.x-12.x and a driver of r580 or later. `make doctor` checks all of it.
CUTILE_TOOLCHAIN ?= 13.4.*
cutile: $(BIN)/.installed
	$(BIN)/python -m pip install --quiet cuda-tile "nvidia-cuda-tileiras==$(CUTILE_TOOLCHAIN)" \
		"nvidia-cuda-nvcc==$(CUTILE_TOOLCHAIN)" "nvidia-nvvm==$(CUTILE_TOOLCHAIN)"
	$(BIN)/tilegym-edu doctor

# Wheels for GPU nodes without internet, downloaded here (tilegym_edu/wheelhouse.py): the course,
# its dependencies for the node's Python (PyPI's torch for Linux is the CUDA build), with CUTILE=1
# cuda-tile and its toolchain at CUTILE_TOOLCHAIN; WHEEL_HAVE names what the node's image has.
#   make wheelhouse WHEEL_PYTHON=3.12 WHEEL_HAVE="torch triton" CUTILE=1
WHEELHOUSE   ?= wheelhouse
WHEEL_PYTHON ?= $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
WHEEL_HAVE   ?=
wheelhouse: $(BIN)/.installed
	$(BIN)/python -m tilegym_edu.wheelhouse --out $(WHEELHOUSE) --python $(WHEEL_PYTHON) \
		$(if $(WHEEL_HAVE),--have $(WHEEL_HAVE)) $(if $(CUTILE),--cutile "$(CUTILE_TOOLCHAIN)")

notebooks: $(BIN)/.installed
	$(BIN)/tilegym-edu generate

clean:
	rm -rf .grading
