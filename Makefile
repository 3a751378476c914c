# Two entry points: `make demo` and `make test`. Both create/reuse .venv and install what they need.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_TRACE := examples/traces/h200_qwen3moe_eager_prefill_decode.json.gz
OUT := out

.PHONY: demo test install dev bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.core: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	@touch $@

$(VENV)/.dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $@ $(VENV)/.core

install: $(VENV)/.core
dev: $(VENV)/.dev

demo: $(VENV)/.core
	@mkdir -p $(OUT)
	$(BIN)/attrib analyze $(DEMO_TRACE)
	$(BIN)/attrib analyze $(DEMO_TRACE) --format json -o $(OUT)/demo.analysis.json --force
	@echo "wrote $(OUT)/demo.analysis.json"

test: $(VENV)/.dev
	$(BIN)/python -m pytest -q -p no:cacheprovider

bench: $(VENV)/.core
	@mkdir -p $(OUT)
	$(BIN)/python bench/scale.py $(DEMO_TRACE) 16 $(OUT)/scaled_1m.json
	$(BIN)/python bench/load.py $(OUT)/scaled_1m.json

clean:
	rm -rf $(VENV) $(OUT) build *.egg-info
