# Two entry points: `make demo` and `make test`. Both create/reuse .venv and install what they need.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_TRACE := examples/traces/h200_qwen3moe_eager_prefill_decode.json.gz
OUT := out

.PHONY: demo test typecheck install dev bench bench-memory floors clean

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

# mypy over attrib/, collectors/, rules/ (config: pyproject.toml [tool.mypy]); its cache in the venv
typecheck: $(VENV)/.dev
	$(BIN)/python -m mypy --cache-dir $(VENV)/.mypy_cache

# one worker per core (CI: 2); a test module stays on one worker, so its cached analyses are shared
test: $(VENV)/.dev typecheck
	$(BIN)/python -m pytest -q -p no:cacheprovider -n auto --dist loadfile

$(OUT)/scaled_1m.json: bench/scale.py $(DEMO_TRACE) | $(VENV)/.core
	@mkdir -p $(OUT)
	$(BIN)/python bench/scale.py $(DEMO_TRACE) 16 $@

bench: $(VENV)/.core $(OUT)/scaled_1m.json
	$(BIN)/python bench/load.py $(OUT)/scaled_1m.json --repeat 3

# peak RSS and time on traces of 1, 4 and 8 GB built from the demo trace (deleted after; see README)
bench-memory: $(VENV)/.core
	$(BIN)/python bench/memory.py --sizes 1,4,8 --gzip --before-max 1 -o $(OUT)/memory.jsonl

# The lowest declared versions (pyproject floors, `>=X` taken as `==X`) in a scratch venv, then the tests.
# Downloads from the package index, so it is not part of `make test`.
FLOORS_VENV ?= .venv-floors
floors:
	rm -rf $(FLOORS_VENV)
	$(PY) -m venv $(FLOORS_VENV)
	$(FLOORS_VENV)/bin/python -m pip install -q --upgrade pip
	$(PY) .ci/floors.py pyproject.toml > $(FLOORS_VENV)/floors.txt
	$(FLOORS_VENV)/bin/python -m pip install -q -c $(FLOORS_VENV)/floors.txt -e '.[dev]'
	$(FLOORS_VENV)/bin/python -m pip freeze --exclude-editable | grep -iE '^(polars|orjson|msgspec|click|scipy|numpy|tomli|pytest|jsonschema|transformers|torch)=='
	$(FLOORS_VENV)/bin/python -m pytest -q -p no:cacheprovider

clean:
	rm -rf $(VENV) $(FLOORS_VENV) $(OUT) build *.egg-info
