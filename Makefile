# Chapter 34 kit. `make` builds everything and grades the bundled examples; `make test` runs the tests.
PYTHON      ?= python3
VENV        := .venv
PY          := $(VENV)/bin/python
STAMP       := $(VENV)/.installed-$(shell cksum < requirements.txt | cut -d' ' -f1)
SUBMISSIONS ?=
ROSTER      ?=
LMS         ?= auto
# A regex is passed through the environment untouched: make and the shell expand no `$` in it.
export CH34_NAME_PATTERN := $(value NAME_PATTERN)
REPORT      ?= report
# Limits of one submission (`make autograde CELL_TIMEOUT=120`); empty: the kit's defaults
# (grading/limits.py). The chosen ones are passed on as --cell-timeout, --notebook-timeout, --memory-gb.
CELL_TIMEOUT     ?=
NOTEBOOK_TIMEOUT ?=
MEMORY_GB        ?=
LIMIT_FLAGS := $(if $(CELL_TIMEOUT),--cell-timeout $(CELL_TIMEOUT)) \
  $(if $(NOTEBOOK_TIMEOUT),--notebook-timeout $(NOTEBOOK_TIMEOUT)) $(if $(MEMORY_GB),--memory-gb $(MEMORY_GB))
JOBS        ?= $(shell nproc)
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: all setup sandbox export-tools export screenshots figures notebooks solutions examples intake autograde merge gradescope test test-fast test-heavy bench compat engine-diff lint clean distclean

all: notebooks solutions examples

setup: $(STAMP)

$(STAMP): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
	rm -f $(VENV)/.installed-* && touch $@

# The autograder's sandbox is Debian's bubblewrap: installed here when it is missing and we may
# (root, apt-get); otherwise the grader runs kernels without it and says so on every run.
sandbox:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing bubblewrap (the autograder's sandbox)"; \
	    apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null; \
	  else \
	    echo "WARNING: bubblewrap is missing; install it (sudo apt-get install bubblewrap) or student code runs unsandboxed" >&2; \
	  fi; }

# `make export` prints the solutions with Debian's headless Chromium and needs Chinese fonts and
# a colour emoji font (the notebook prints ✅ ❌ ⏳ 🛑): installed here when missing and we may
# (root, apt-get); otherwise a clear error.
EXPORT_PACKAGES := chromium fonts-noto-cjk fonts-noto-color-emoji poppler-utils
export-tools:
	@command -v chromium >/dev/null 2>&1 && command -v pdftoppm >/dev/null 2>&1 && fc-list :lang=zh | grep -q . && fc-list | grep -qi "color emoji" || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing $(EXPORT_PACKAGES) (to print and check the solutions)"; \
	    apt-get update -qq && apt-get install -y -qq $(EXPORT_PACKAGES) >/dev/null; \
	  else \
	    echo "error: make export needs $(EXPORT_PACKAGES): sudo apt-get install $(EXPORT_PACKAGES)" >&2; exit 1; \
	  fi; }

# The solutions for students, after the deadline: export/ch34_prefix_cache_solutions.html (maths
# as MathML, works offline) and .pdf.
export: $(STAMP) export-tools
	$(PY) -m grader.kit.publish.export --out export

# A PNG per screenful of the student notebook open in JupyterLab (folds applied) and of the
# exported solutions: build/screenshots/, for a person to look at.
screenshots: $(STAMP) export-tools export
	$(PY) -m grader.kit.publish.screenshots --out build/screenshots

# The figures' PNGs (grader/source/ch34_prefix_cache/figures/, and figures.json: the hash of the
# SVG each was rendered from), drawn from the SVG code by headless Chromium: run after changing a
# drawing and commit them. The build only embeds them; it refuses a PNG older than its drawing.
figures: $(STAMP) export-tools
	$(PY) -m grader.kit.authoring.figures.render

notebooks: $(STAMP)
	$(PY) -m grader.kit.authoring.build notebooks

solutions: $(STAMP)
	$(PY) -m grader.kit.authoring.build solutions

build/grading-course/gradebook.db:
	$(MAKE) notebooks

# Grade the bundled examples (correct, untouched, partly wrong) and print the table.
examples: $(STAMP) sandbox build/grading-course/gradebook.db
	rm -rf build/examples build/examples-report
	$(PY) -m grader.kit.authoring.examples build/examples
	$(PY) -m grader.kit.autograde build/examples --report build/examples-report --jobs $(JOBS)

# Who would be graded, under which id, from which file and why (REPORT/intake.csv); grades nothing.
# Exits non-zero when no file could be tied to a known student.
intake: $(STAMP)
	@test -n "$(SUBMISSIONS)" || { echo "usage: make intake SUBMISSIONS=<folder or .zip> [ROSTER=<roster.csv>] [CHOICES=<choices.csv>] [NAME_PATTERN='<regex with (?P<student_id>...)>'] [REPORT=<folder>]" >&2; exit 2; }
	$(PY) -m grader.kit.autograde "$(SUBMISSIONS)" --report "$(REPORT)" --intake-only \
	  $(if $(ROSTER),--roster "$(ROSTER)") $(if $(CHOICES),--choices "$(CHOICES)") $(if $(value NAME_PATTERN),--name-pattern "$$CH34_NAME_PATTERN")

autograde: $(STAMP) sandbox build/grading-course/gradebook.db
	@test -n "$(SUBMISSIONS)" || { echo "usage: make autograde SUBMISSIONS=<folder or .zip> [ROSTER=<roster.csv>] [CHOICES=<choices.csv>] [NAME_PATTERN='<regex with (?P<student_id>...)>'] [REPORT=<folder>] [LMS=auto|all|canvas|moodle|none] [CELL_TIMEOUT=<s>] [NOTEBOOK_TIMEOUT=<s>] [MEMORY_GB=<GiB>] [SHARD=K/N]" >&2; exit 2; }
	$(PY) -m grader.kit.autograde "$(SUBMISSIONS)" --report "$(REPORT)" --jobs $(JOBS) --lms "$(LMS)" $(LIMIT_FLAGS) $(if $(SHARD),--shard $(SHARD)) \
	  $(if $(ROSTER),--roster "$(ROSTER)") $(if $(CHOICES),--choices "$(CHOICES)") $(if $(value NAME_PATTERN),--name-pattern "$$CH34_NAME_PATTERN")

# The reports of `make autograde SHARD=K/N` (one a shard, e.g. on a cluster: deploy/, docs/cluster.md)
# merged into the one report a single run writes. Exits 5 naming the students of a missing shard.
merge: $(STAMP)
	@test -n "$(REPORT)" -a -n "$(SHARDS)" || { echo 'usage: make merge REPORT=<folder> SHARDS="<shard folders>"' >&2; exit 2; }
	$(PY) -m grader.kit.cluster.merge --report "$(REPORT)" $(SHARDS)

# Gradescope's autograder (build/gradescope/autograder.zip): setup.sh and run_autograder, which
# grades the one submitted notebook with this kit (grader/kit/cluster/hosted.py; docs/cluster.md).
gradescope: $(STAMP) build/grading-course/gradebook.db
	$(PY) -m grader.kit.cluster.gradescope

# One pytest worker a core (pytest-xdist). A test module runs whole on one worker (`--dist
# loadfile`): its module fixtures are made once, and its checks for leftover processes see only
# its own batches. Modules go out in the order tests/conftest.py sorts them (the slow first), not
# by their number of tests. A fixture several modules share is made once for all workers
# (tests/conftest.py, made_once). TEST_WORKERS=0 runs the suite in this one process.
TEST_WORKERS ?= $(shell nproc)
PYTEST      := $(PY) -m pytest -q -p xdist -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

test: $(STAMP) sandbox export-tools
	$(PYTEST) -m "not heavy" tests

# The heavy tier, outside `make test`: whole fault catalogues through real nbgrader, clusters
# started by the test. Each heavy test is marked `@pytest.mark.heavy` (and slow).
test-heavy: $(STAMP) sandbox export-tools
	$(PYTEST) -m heavy tests

# The maintainer's loop: every test that needs no Jupyter kernel, no nbgrader run and no browser.
test-fast: $(STAMP)
	$(PYTEST) -m "not slow and not heavy" tests

bench: $(STAMP) sandbox build/grading-course/gradebook.db
	@for script in bench/bench_*.py; do echo "== $$script"; $(PY) $$script || exit 1; done

# The learners' platforms: every cell of the reference notebook, nothing on stderr, on Colab's default
# runtime (Python 3.13, torch 2.11), ModelScope's image (3.12, torch 2.10) and its legacy image (3.11,
# torch 2.3.1), and the floor (3.10, torch 1.11). One throwaway venv each under build/compat/ from the
# Pythons in ~/.pyenv/versions (several GB of wheels each, removed after its run): not in `make test`.
compat: $(STAMP)
	$(PY) -m grader.kit.publish.compat --matrix

# The chapter's reference schedulers (part four; part five's paged pool once it is in the source)
# against vLLM's own v1 Scheduler (pinned: 0.33.0), step by step on 240 seeded traces each
# (docs/engine-diff.md). One throwaway venv under build/engine-diff/ with vLLM and the CUDA torch it
# pulls (about 10 GB, run on the CPU; built once): not in `make test`.
engine-diff: $(STAMP)
	$(PY) -m bench.engine_diff.run

lint: $(STAMP)
	$(VENV)/bin/ruff check grader tests bench

clean:
	rm -rf build report export .pytest_cache .hypothesis
	find . -name __pycache__ -not -path "./$(VENV)/*" -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
