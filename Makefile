# Chapter 34 kit. `make` builds everything and grades the bundled examples; `make test` runs the tests.
PYTHON      ?= python3
VENV        := .venv
PY          := $(VENV)/bin/python
STAMP       := $(VENV)/.installed-$(shell cksum < requirements.txt | cut -d' ' -f1)
SUBMISSIONS ?=
REPORT      ?= report
JOBS        ?= $(shell nproc)
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: all setup notebooks solutions examples autograde test bench lint clean distclean

all: notebooks solutions examples

setup: $(STAMP)

$(STAMP): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
	rm -f $(VENV)/.installed-* && touch $@

notebooks: $(STAMP)
	$(PY) -m grader.kit.build notebooks

solutions: $(STAMP)
	$(PY) -m grader.kit.build solutions

build/grading-course/gradebook.db:
	$(MAKE) notebooks

# Grade the bundled examples (correct, untouched, partly wrong) and print the table.
examples: $(STAMP) build/grading-course/gradebook.db
	rm -rf build/examples build/examples-report
	$(PY) -m grader.kit.submissions build/examples
	$(PY) -m grader.kit.autograde build/examples --report build/examples-report --jobs $(JOBS)

autograde: $(STAMP) build/grading-course/gradebook.db
	@test -n "$(SUBMISSIONS)" || { echo "usage: make autograde SUBMISSIONS=<folder of .ipynb files> [REPORT=<folder>]" >&2; exit 2; }
	$(PY) -m grader.kit.autograde "$(SUBMISSIONS)" --report "$(REPORT)" --jobs $(JOBS)

test: $(STAMP)
	$(PY) -m pytest -q tests

bench: $(STAMP) build/grading-course/gradebook.db
	@for script in bench/bench_*.py; do echo "== $$script"; $(PY) $$script || exit 1; done

lint: $(STAMP)
	$(VENV)/bin/ruff check grader tests bench

clean:
	rm -rf build report .pytest_cache .hypothesis
	find . -name __pycache__ -not -path "./$(VENV)/*" -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
