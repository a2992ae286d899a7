# Two commands do all the set-up on a fresh machine (Python 3.11+):
#   make demo   -> light install (simulator only) + simulate the bundled Azure trace slice
#   make test   -> full install (simulator + torch/triton kernel + Ray + test tools) + all tests
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip

.PHONY: demo test lint bench clean

# (the compiled modules' sources: pyproject.toml's one list)
COMPILED := $(shell $(PYTHON) -c "import tomllib; print(' '.join(m.replace('.', '/') + '.py' for m in tomllib.load(open('pyproject.toml', 'rb'))['tool']['kvsim']['compiled']))")

$(VENV)/.base: pyproject.toml setup.py $(wildcard sim/*/*.pxd sim/*/*/*.pxd) $(COMPILED)
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
