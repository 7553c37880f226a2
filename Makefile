# ares: set-up, tests, demo, benchmarks and one target per pipeline stage.
# `make demo` and `make test` each create .venv first when it is missing.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TORCH_VERSION ?= 2.13.0
ARES   := $(BIN)/ares
export TOKENIZERS_PARALLELISM := false

.PHONY: setup test test-slow test-all coverage coverage-tiers lint format demo demo-vl rehearse-paec rehearse-ares bench pipeline report clean help vllm-contract-wheels

help:
	@echo "make demo    set up and run the whole pipeline on the embedded toy world"
	@echo "make demo-vl the visual pipeline (tiny Qwen2.5-VL): base, passrate, curate, sft, rl (AEPO), eval"
	@echo "make rehearse-paec  PAEC's recipe on a Qwen2.5-Math-1.5B shape twin (real tokenizer, 152k vocab)"
	@echo "make rehearse-ares  ARES's cold start + AEPO on a Qwen2.5-VL-3B shape twin (images, 3-D rope)"
	@echo "make test    set up and run the fast tests (CPU, in parallel; the slow tier left out)"
	@echo "make test-slow  the slow tier alone (multi-rank DeepSpeed, long end-to-end runs)"
	@echo "make test-all   every non-GPU test (fast and slow)"
	@echo "make coverage-tiers  line coverage of the fast tier against every non-GPU test, and what only the slow tier reaches"
	@echo "make lint    ruff check + ruff format --check"
	@echo "make bench   run benchmarks/ (JSON lines into benchmarks/results/)"
	@echo "make pipeline PIPELINE=toy   run pipelines/<name>.yaml stage by stage"
	@echo "make report PIPELINE=toy     its stage times, comparison table and HTML page with figures"

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel
	@# CPU build of torch on machines without CUDA; the CUDA build otherwise.
	if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
	  $(BIN)/pip install -q "torch<=2.14.1"; \
	else \
	  $(BIN)/pip install -q "torch==$(TORCH_VERSION)+cpu" 2>/dev/null \
	  || $(BIN)/pip install -q "torch==$(TORCH_VERSION)" --index-url https://download.pytorch.org/whl/cpu; \
	fi
	$(BIN)/pip install -q -e ".[dev]"
	@# DeepSpeed builds against the installed torch (no isolated build env that would pull another torch).
	DS_BUILD_OPS=0 $(BIN)/pip install -q --no-build-isolation "deepspeed>=0.15,<0.20"
	touch $(STAMP)

setup: $(STAMP)

# Tests in parallel (pytest-xdist, one worker per core; each test is its own unit of work, except that the
# tests of a file sharing a module-scoped fixture stay on one worker: tests/conftest.py), the slow tier
# (`-m slow`: multi-rank DeepSpeed runs and end-to-end runs whose lines faster tests also reach) left out.
PYTEST := $(BIN)/python -m pytest -q --timeout=600 -n auto --dist loadgroup
test: $(STAMP)
	$(PYTEST) -m "not gpu and not slow"

# The slow tier alone (.ci/run runs it after `make test`, so CI runs every non-GPU test).
test-slow: $(STAMP)
	$(PYTEST) -m "slow and not gpu"

# Every non-GPU test, the slow ones included, in one run.
test-all: $(STAMP)
	$(PYTEST) -m "not gpu"

# Line coverage of ares_cli/ over the tests (subprocesses included; see [tool.coverage] in pyproject.toml).
coverage: $(STAMP)
	rm -rf build/coverage && mkdir -p build/coverage
	$(BIN)/python -m coverage run -m pytest -q -m "not gpu" --timeout=600
	$(BIN)/python -m coverage combine -q && $(BIN)/python -m coverage report --format=total

# Coverage of each tier apart, then combined (no test runs twice): what the fast tier (`make test`) covers
# against every non-GPU test, and the lines only the slow tier reaches (tests/coverage_tiers.py).
COV_TIER = $(BIN)/python -m coverage run -m pytest -q --timeout=600 -n auto --dist loadgroup
coverage-tiers: $(STAMP)
	rm -rf build/cov-fast build/cov-slow build/cov-all && mkdir -p build/cov-fast build/cov-slow build/cov-all
	-COVERAGE_FILE=$(CURDIR)/build/cov-fast/.coverage $(COV_TIER) -m "not gpu and not slow"
	-COVERAGE_FILE=$(CURDIR)/build/cov-slow/.coverage $(COV_TIER) -m "slow and not gpu"
	$(BIN)/python -m coverage combine -q --data-file=build/cov-fast/.coverage build/cov-fast
	$(BIN)/python -m coverage combine -q --data-file=build/cov-slow/.coverage build/cov-slow
	$(BIN)/python -m coverage combine -q --keep --data-file=build/cov-all/.coverage build/cov-fast/.coverage build/cov-slow/.coverage
	$(BIN)/python -m coverage json -q --data-file=build/cov-fast/.coverage -o build/cov-fast.json
	$(BIN)/python -m coverage json -q --data-file=build/cov-all/.coverage -o build/cov-all.json
	$(BIN)/python tests/coverage_tiers.py build/cov-fast.json build/cov-all.json --json build/coverage-tiers.json

lint: $(STAMP)
	$(BIN)/ruff check ares_cli tests benchmarks studies
	$(BIN)/ruff format --check ares_cli tests benchmarks studies

format: $(STAMP)
	$(BIN)/ruff check --fix ares_cli tests benchmarks studies
	$(BIN)/ruff format ares_cli tests benchmarks studies

PIPELINE ?= toy
PIPELINE_STATE = build/pipelines/$(PIPELINE)

# Each stage of pipelines/$(PIPELINE).yaml is a Make target: unchanged stages are not rerun.
pipeline: $(STAMP)
	$(BIN)/python -m ares_cli.pipeline render pipelines/$(PIPELINE).yaml --state $(PIPELINE_STATE) --ares $(ARES)
	$(MAKE) --no-print-directory -f $(PIPELINE_STATE)/Makefile all

# Stage times and the comparison table (report.md), and one self-contained page with every figure
# (report.html; the PNG/SVG figures in report-figures/) of a pipeline that has run.
report: $(STAMP)
	$(ARES) report pipeline $(PIPELINE_STATE) | tee $(PIPELINE_STATE)/report.md
	$(ARES) report html $(PIPELINE_STATE)

# The whole toy pipeline, then its report (build/pipelines/toy/report.md and report.html).
demo: $(STAMP)
	$(MAKE) --no-print-directory pipeline PIPELINE=toy
	$(MAKE) --no-print-directory report PIPELINE=toy

# The visual toy pipeline (a tiny Qwen2.5-VL; images through every stage), then its report.
demo-vl: $(STAMP)
	$(MAKE) --no-print-directory pipeline PIPELINE=toy-vl
	$(MAKE) --no-print-directory report PIPELINE=toy-vl

# The papers' recipes on shape twins (real configurations and tokenizer, random weights, 2 layers) and
# local stand-ins of their data: what breaks at real shapes breaks here first (docs/performance.md).
rehearse-paec rehearse-ares: $(STAMP)
	$(MAKE) --no-print-directory pipeline PIPELINE=$@
	$(MAKE) --no-print-directory report PIPELINE=$@

bench: $(STAMP)
	mkdir -p benchmarks/results
	for b in benchmarks/bench_*.py; do \
	  echo "== $$b" >&2; $(BIN)/python $$b | tee -a benchmarks/results/$$(date +%Y%m%d).jsonl || exit 1; \
	done

# The vLLM wheels of the supported range's bounds, without dependencies, cached outside the tree for
# tests/test_vllm_contract.py (which reads their sources by ast; skipped when absent).
VLLM_WHEELS ?= $(HOME)/.cache/ares/vllm-wheels
vllm-contract-wheels: $(STAMP)
	mkdir -p $(VLLM_WHEELS)
	for v in 0.16.0 0.34.0; do ls $(VLLM_WHEELS)/vllm-$$v-*.whl >/dev/null 2>&1 \
	  || $(BIN)/pip download -q --no-deps "vllm==$$v" -d $(VLLM_WHEELS) || exit 1; done

clean:
	rm -rf artifacts .pytest_cache .ruff_cache
