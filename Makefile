# Two entry points, both work on a fresh clone with no network beyond PyPI:
#   make test   create .venv if missing, install, run the whole test suite
#   make demo   create .venv if missing, install, run the main job on the packaged model (CPU)
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
GLUE_DIR ?= $(abspath $(firstword $(wildcard ../shared/data/glue)))
export GLUE_DIR
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1

.PHONY: test demo clean

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

test: $(STAMP)
	$(PY) -m pytest

demo: $(STAMP)
	$(PY) -m course_lib finetune --task sst2 --max-train-samples 4000 --epochs 2 --max-len 64 \
		--lr 5e-5 --warmup-ratio 0.06 --batch-size 32 --seed 0 --output-dir runs/demo_sst2
	@echo "metrics: runs/demo_sst2/metrics.json"

clean:
	rm -rf runs .pytest_cache
