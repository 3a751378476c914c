# Two entry points: `make demo` and `make test`. Both create/reuse .venv and install what they need.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_TRACE := examples/traces/h200_qwen3moe_eager_prefill_decode.json.gz
OUT := out

.PHONY: demo test typecheck browser install dev bench bench-memory floors clean

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

# Debian's chromium for the browser tests: installed when missing and root; else they skip, loudly
browser:
	@bash .ci/chromium.sh

# one worker per core (CI: 2); a test module stays on one worker, so its cached analyses are shared
test: $(VENV)/.dev typecheck browser
	$(BIN)/python -m pytest -q -p no:cacheprovider -n auto --dist loadfile

$(OUT)/scaled_1m.json: bench/scale.py $(DEMO_TRACE) | $(VENV)/.core
	@mkdir -p $(OUT)
	$(BIN)/python bench/scale.py $(DEMO_TRACE) 16 $@

bench: $(VENV)/.core $(OUT)/scaled_1m.json
	$(BIN)/python bench/load.py $(OUT)/scaled_1m.json --repeat 3

# peak RSS and time on traces of 1, 4 and 8 GB built from the demo trace (deleted after; see README)
bench-memory: $(VENV)/.core
	$(BIN)/python bench/memory.py --sizes 1,4,8 --gzip --before-max 1 -o $(OUT)/memory.jsonl

# The lowest declared versions (`>=X` taken as `==X`) of the dependencies and the plot, zstd and xlsx
# extras, in a scratch venv; then the demo and each extra's output. Downloads the old releases from
# the package index; CI runs it (.ci/run).
FLOORS_VENV ?= .venv-floors
FLOORS_EXTRAS := plot,zstd,xlsx
floors:
	rm -rf $(FLOORS_VENV)
	$(PY) -m venv $(FLOORS_VENV)
	$(PY) .ci/floors.py pyproject.toml $(FLOORS_EXTRAS) > $(FLOORS_VENV)/floors.txt
	$(FLOORS_VENV)/bin/python -m pip install -q -c $(FLOORS_VENV)/floors.txt -e '.[$(FLOORS_EXTRAS)]'
	$(FLOORS_VENV)/bin/python -m pip freeze --exclude-editable | grep -iE '^(polars|orjson|msgspec|click|scipy|numpy|tomli|matplotlib|zstandard|xlsxwriter)=='
	$(MAKE) --no-print-directory demo VENV=$(FLOORS_VENV) OUT=$(FLOORS_VENV)/out
	$(FLOORS_VENV)/bin/python .ci/floors_smoke.py $(DEMO_TRACE) $(FLOORS_VENV)/out

clean:
	rm -rf $(VENV) $(FLOORS_VENV) $(OUT) build *.egg-info
