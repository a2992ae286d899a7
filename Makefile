# Two commands do all the set-up on a fresh machine (Python 3.11+):
#   make demo   -> light install (simulator only) + simulate the bundled Azure trace slice
#   make test   -> full install (simulator + torch/triton kernel + Ray + test tools) + all tests
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip

.PHONY: demo test lint bench clean

$(VENV)/.base: pyproject.toml setup.py $(wildcard sim/*/*.pxd sim/*/*/*.pxd) sim/cost/decode_time.py sim/io/step_fold.py sim/io/fill.py sim/engine/fastforward/run_layout.py sim/kv/free_queue.py sim/kv/block_pool.py sim/kv/block_table.py sim/kv/margin.py sim/kv/table_loops.py sim/sched/waiting_pass.py sim/engine/step_batch.py sim/engine/fastforward/decoders.py sim/engine/fastforward/steps.py sim/engine/fastforward/quiet_steps.py
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e .
	touch $@

$(VENV)/.all: $(VENV)/.base
	$(PIP) install -q -e '.[all]'
	touch $@

demo: $(VENV)/.base
	$(VENV)/bin/kvsim simulate --out runs/demo

test: $(VENV)/.all
	$(VENV)/bin/ruff check sim workloads calibration tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest -q --nbmake tests notebooks

bench: $(VENV)/.all
	$(PY) bench/bench_engine.py

clean:
	rm -rf $(VENV) runs
