# Entry points; all work on a fresh clone with no network beyond PyPI:
#   make install     create .venv, install requirements.txt and the notebooks' kernel (attention-lab); no tests
#   make test        create .venv if missing, install, run the test suite and the notebooks (nbval)
#   make demo        run every notebook's smoke preset through the batch runner; print the results table
#                    (training runs that make test's notebooks finished with the same settings are read back)
#   make notebooks   re-execute the notebooks in place (smoke defaults), refreshing their committed outputs
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1

.PHONY: install test demo notebooks clean

$(STAMP): requirements.txt pyproject.toml course_lib/kernel.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	$(PY) -m course_lib.kernel install
	touch $@

install: $(STAMP)

# Two pytest processes with one torch thread each (a notebook's cells stay together, in order): on 2 cores the
# suite takes 0.6 of the time one process with two threads does, whose imports, tokenising and process starts
# leave a core idle (results/test_suite.md). TEST_WORKERS=0: one process (still one thread).
TEST_WORKERS ?= 2
test: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

demo: $(STAMP)
	TQDM_DISABLE=1 $(PY) -m course_lib sweep ci/grids/notebooks_smoke.yaml
	@cat runs/sweep/notebooks_smoke/results.md
	@echo "executed notebooks: runs/sweep/notebooks_smoke/*/*.ipynb"

notebooks: $(STAMP)
	cd notebooks && for nb in [0-9][0-9]_*.ipynb; do \
		CI=true TQDM_DISABLE=1 ../$(PY) -m jupyter nbconvert --to notebook --execute --inplace \
			--ExecutePreprocessor.kernel_name=attention-lab --ExecutePreprocessor.timeout=1200 $$nb || exit 1; \
	done

clean:
	rm -rf runs .pytest_cache
