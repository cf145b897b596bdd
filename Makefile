# MemoryHub: `make run` serves a demo on a fresh machine; `make test` runs the whole suite.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The packaged MiniLM exported to ONNX once, at install (memories/onnx_minilm.py).
ONNX_MODEL := $(VENV)/share/memoryhub/all-MiniLM-L6-v2.onnx
# Its 8-bit copy (MEMORYHUB_EMBEDDER_PRECISION=int8), quantized from it.
ONNX_INT8 := $(VENV)/share/memoryhub/all-MiniLM-L6-v2-int8.onnx
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
PYTEST_ARGS ?=

.PHONY: install chromium migrate run test lint lint-ts format format-ts bench stop-db screenshots
# The TypeScript client: its dev dependencies from the lockfile (npm ci), and its build.
TS_CLIENT := clients/typescript
NODE_STAMP := $(TS_CLIENT)/node_modules/.installed

$(STAMP): pyproject.toml clients/python/pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first, pinned: the CPU build lies on disk; anything unpinned pulls a CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[dev,local-embeddings]"
	# The Python client (tests/clients drive it against a live server), with its integrations.
	$(BIN)/pip install --quiet -e "./clients/python[langgraph,langmem,agents]"
	@touch $(STAMP)

$(ONNX_MODEL): $(STAMP)
	$(BIN)/python -m memories.onnx_minilm export

$(ONNX_INT8): $(ONNX_MODEL)
	$(BIN)/python -m memories.onnx_minilm quantize

$(NODE_STAMP): $(TS_CLIENT)/package.json $(TS_CLIENT)/package-lock.json
	cd $(TS_CLIENT) && npm ci --no-audit --no-fund && npm run build
	@touch $(NODE_STAMP)

# tests/clients/test_typescript.py runs the client's Node tests (Node >= 20) in `make test`.
install: $(STAMP) $(ONNX_MODEL) $(ONNX_INT8) $(NODE_STAMP)

# Browser tests drive the system Chromium (never a downloaded one).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing chromium (apt-get)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

migrate: install
	$(BIN)/python manage.py migrate --noinput

run: install migrate
	$(BIN)/python manage.py seed_demo
	$(BIN)/python manage.py serve

test: install chromium
	$(BIN)/python manage.py makemigrations --check --dry-run
	$(BIN)/python -m pytest -n 2 $(PYTEST_ARGS)

# Lint needs only the tools: the virtualenv (ruff, mypy) and the client's node_modules.
lint: $(STAMP) lint-ts
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The TypeScript client: ESLint (type-aware; it builds dist/ first) and Prettier's check.
lint-ts: $(NODE_STAMP)
	cd $(TS_CLIENT) && npm run --silent lint && npm run --silent format:check

format: $(STAMP) format-ts
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

format-ts: $(NODE_STAMP)
	cd $(TS_CLIENT) && npm run --silent format

# The benchmarks: the repository's bench/, never in the installed package (docs/benchmarks.md).
bench: install
	$(BIN)/python -m bench $(BENCH_ARGS)

# Stop the embedded PostgreSQL of ./var (data stays).
stop-db: install
	$(BIN)/python -m memoryhub.embedded_db stop

# The console's pages as PNG files in docs/screenshots/ (a throwaway database, the system
# Chromium): what the README and the docs show.
screenshots: install chromium
	$(BIN)/python manage.py screenshots
