# mirror_core — the two commands that matter: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test system-test compose-check airflow test-unit test-integration lint typecheck bench soak wan-test dev-up dev-down clean docs docs-build

# Re-install whenever the dependency pins change.
$(STAMP): pyproject.toml constraints.txt scripts/ensure-toxiproxy.sh scripts/ensure-krb5-dev.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	bash scripts/ensure-krb5-dev.sh  # before pip: it builds the gssapi package against MIT's krb5-config
	$(BIN)/pip install -q -c constraints.txt -e '.[dev,airflow,spark,aws]'
	$(BIN)/mirror-core dev fetch
	$(BIN)/python -m mirror_core.devcluster.spark_packages
	bash scripts/ensure-test-servers.sh
	bash scripts/ensure-gssapi-client.sh
	bash scripts/ensure-toxiproxy.sh >/dev/null
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/python scripts/demo.py

test: install compose-check
	$(BIN)/ruff check mirror_core tests scripts bench dags plugins spark_jobs
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(MAKE) --no-print-directory docs-build
	$(BIN)/pytest -q -ra --durations=25 tests --ignore=tests/wan --ignore=tests/system

# The distributed topology on real engines (tests/system): 3-node KRaft clusters, mirror fleet, PostgreSQL,
# Prometheus, with brokers and mirrors killed under load. Separate from `make test`: it takes minutes.
system-test: install
	$(BIN)/pytest -q -ra tests/system

# The documentation site (mkdocs.yml, docs/). `docs` serves it at http://127.0.0.1:8000 with live reload;
# `docs-build` (run by `make test`) fails on any warning: a broken link or anchor, a page left out of the nav.
DOCS_SITE := .dev/site

docs: install
	$(BIN)/mkdocs serve

docs-build: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir $(DOCS_SITE)

# `docker compose config` validates docker-compose.yml (no Docker engine needed).
compose-check:
	bash scripts/compose-plugin.sh >/dev/null
	docker compose config -q

test-unit: install
	$(BIN)/pytest -q tests/unit

test-integration: install
	$(BIN)/pytest -q tests/integration

lint: install
	$(BIN)/ruff check mirror_core tests scripts bench dags plugins spark_jobs
	$(BIN)/mypy
	$(BIN)/lint-imports

# The WAN fault suite (toxiproxy between the mirror and the target; ~10 min). WAN_PARTITION_SECONDS sets
# the long partition (default 300 s, the issue's 5 minutes).
wan-test: install
	$(BIN)/pytest -q -ra -s tests/wan

bench: install
	$(BIN)/python -m bench.run $(BENCH_ARGS)

soak: install
	$(BIN)/python -m bench.soak $(SOAK_ARGS)

airflow: install
	bash scripts/airflow.sh

dev-up: install
	$(BIN)/mirror-core dev up

dev-down: install
	$(BIN)/mirror-core dev down

clean:
	-$(BIN)/mirror-core dev down
	rm -rf $(VENV) .dev .pytest_cache .mypy_cache .ruff_cache
