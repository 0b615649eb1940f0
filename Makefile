# turnkeeper: `make run` starts the sidecar, `make test` installs and runs every test.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
STAMP := $(VENV)/.installed
CLIENT_DIRS := $(patsubst %/Makefile,%,$(wildcard clients/*/Makefile))
ADDRESS ?= 127.0.0.1:50051
HTTP ?= 127.0.0.1:9464
DASHBOARD := service/turnkeeper/server/ops/dashboard
DASHBOARD_VENDOR := $(DASHBOARD)/static/vendor

.PHONY: help venv native test-native wheel run generate generate-python generate-version check-generated dashboard-vendor dashboard-screenshot check-vendored lint fmt test test-python test-clients test-install system-deps bench soak clean

help:
	@echo "make run       start the sidecar on $(ADDRESS) (embedded defaults), dashboard on http://$(HTTP)/"
	@echo "make test      install everything the tests need and run them all"
	@echo "make generate  regenerate committed code from proto/"
	@echo "make lint      buf lint/format, ruff, mypy --strict, stubtest, hadolint, Kubernetes schemas, every client's lint"
	@echo "make bench     run the benchmarks"
	@echo "make soak      a long mixed load run (SOAK_SECONDS, SOAK_CLIENTS, SOAK_SUBSCRIBERS)"

$(STAMP): pyproject.toml VERSION clients/python/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# One resolve: the server needs turnkeeper-client (it carries the turnkeeper.v1 code).
	$(BIN)/pip install --quiet -e '.[dev]' -e clients/python
	touch $@

venv: $(STAMP)

# The native engine (service/turnkeeper-native) is built into the venv by the editable install
# (setuptools-rust, release profile); this rebuilds it when its sources change. Without cargo the
# install warns once and the sidecar runs on the Python engine.
NATIVE_DIR := service/turnkeeper-native
NATIVE_STAMP := $(VENV)/.native
CARGO := $(shell command -v cargo 2>/dev/null)
$(NATIVE_STAMP): $(STAMP) $(wildcard $(NATIVE_DIR)/src/*.rs) $(NATIVE_DIR)/Cargo.toml
	@if [ -n "$(CARGO)" ]; then $(BIN)/pip install --quiet --no-deps -e .; \
	  else echo "warning: cargo not found: the native engine is not built, the sidecar runs on the Python engine"; fi
	touch $@

native: $(NATIVE_STAMP)

run: $(NATIVE_STAMP)
	$(PY) -m turnkeeper.server --listen $(ADDRESS) --http $(HTTP)

# Every client regenerates its code; the Python one also writes the turnkeeper.v1 package the
# server imports (clients/python/src/turnkeeper/v1: the turnkeeper-client distribution carries it).
generate: generate-version
	@for d in $(CLIENT_DIRS); do $(MAKE) -C $$d generate || exit 1; done

generate-python: $(STAMP)
	$(MAKE) -C clients/python generate

# VERSION is the one version; this copies it into the manifests that cannot read it. Packages built
# from a client folder ship the LICENSE, so the Python and npm ones get a copy of it.
generate-version: $(STAMP)
	$(PY) scripts/stamp_version.py
	@for d in clients/python clients/typescript; do cmp -s LICENSE $$d/LICENSE || cp LICENSE $$d/LICENSE; done

# Fails when committed generated code differs from what proto/ produces.
check-generated: generate
	@if [ -n "$$(git status --porcelain -- clients)" ]; then \
	  git status --porcelain -- clients; \
	  echo "generated code drifted from proto/: run 'make generate' and commit"; exit 1; fi

# The dashboard's charting library, copied from the npm package pinned in $(DASHBOARD)/package.json
# (with its license) into the served assets. The copies are committed, so `make run` needs no npm.
dashboard-vendor:
	npm ci --prefix $(DASHBOARD) --no-audit --no-fund --silent
	cp $(DASHBOARD)/node_modules/chart.js/dist/chart.umd.min.js $(DASHBOARD_VENDOR)/chart.umd.min.js
	cp $(DASHBOARD)/node_modules/chart.js/LICENSE.md $(DASHBOARD_VENDOR)/chart.js.LICENSE.md
	cp $(DASHBOARD)/node_modules/@kurkle/color/LICENSE.md $(DASHBOARD_VENDOR)/kurkle-color.LICENSE.md

# Refreshes the README's screenshot: a real sidecar, runtime-like traffic, headless chromium.
dashboard-screenshot: $(STAMP) system-deps
	$(PY) scripts/dashboard_screenshot.py docs/dashboard.png

# Fails when the committed vendored assets differ from the pinned npm packages.
check-vendored: dashboard-vendor
	@if [ -n "$$(git status --porcelain -- $(DASHBOARD_VENDOR))" ]; then \
	  git status --porcelain -- $(DASHBOARD_VENDOR); \
	  echo "vendored dashboard assets drifted: run 'make dashboard-vendor' and commit"; exit 1; fi

# Needs the built native module: stubtest checks service/turnkeeper/_native.pyi against it.
lint: $(NATIVE_STAMP)
	$(BIN)/buf lint
	$(BIN)/buf format --diff --exit-code
	scripts/buf-breaking.sh $(BIN)/buf
	$(BIN)/ruff check service tests bench examples scripts
	$(BIN)/ruff format --check service tests bench examples scripts
	$(BIN)/mypy service scripts bench
	$(BIN)/hadolint Dockerfile
	$(BIN)/kubernetes-validate --strict --quiet deploy/kubernetes/*.yaml
	@if [ -n "$(CARGO)" ]; then cd $(NATIVE_DIR) && cargo fmt --check && \
	  cargo clippy --quiet --all-targets --features python -- -D warnings; fi
	@if [ -n "$(CARGO)" ]; then MYPYPATH=service $(PY) -m mypy.stubtest turnkeeper._native; fi
	# Each client's own lint: ruff + mypy --strict, go vet + gofmt, rustfmt + clippy, tsc + ESLint.
	@for d in $(CLIENT_DIRS); do $(MAKE) --no-print-directory -C $$d lint || exit 1; done

fmt: $(STAMP)
	$(BIN)/buf format -w
	@if [ -n "$(CARGO)" ]; then cd $(NATIVE_DIR) && cargo fmt; fi
	$(BIN)/ruff format service tests bench examples scripts
	$(BIN)/ruff check --fix service tests bench examples scripts

# redis-server, nginx and chromium (Debian packages) for the Redis feed, the fleet test and the
# dashboard's browser test.
system-deps:
	bash scripts/system-deps.sh

test-python: $(NATIVE_STAMP) system-deps test-native
	$(BIN)/pytest -q

# The scanner's unit tests and its bounded fuzz (proptest, a few seconds).
test-native:
	@if [ -n "$(CARGO)" ]; then cd $(NATIVE_DIR) && cargo test --quiet; fi

# An abi3 wheel (CPython >= 3.11) with the native engine in it, and the client wheel that carries
# the generated code the server imports, in dist/ (deploy/systemd/install.sh installs both).
wheel: $(STAMP)
	$(BIN)/pip wheel --quiet --no-deps --wheel-dir dist . clients/python
	@ls dist/turnkeeper-*.whl dist/turnkeeper_client-*.whl

test-clients: $(STAMP)
	@for d in $(CLIENT_DIRS); do echo "== $$d"; $(MAKE) -C $$d test || exit 1; done

# Each client installed as its README says, in a fresh project under /tmp, its README example
# type-checked or built and run against a live server (after test-clients filled the caches).
test-install: $(STAMP)
	$(PY) tests/support/with_server.py -- $(PY) tests/install/check_install.py

test: $(STAMP) lint check-generated check-vendored test-python test-clients test-install

# A long mixed load and chaos run (tests/robustness/soak.py); not part of `make test` or CI.
soak: $(STAMP)
	PYTHONPATH=bench:tests/support$${PYTHONPATH:+:$$PYTHONPATH} $(PY) tests/robustness/soak.py

bench: $(NATIVE_STAMP)
	$(BIN)/pip install --quiet -e '.[bench]'
	$(PY) bench/bench_engine.py
	$(PY) bench/bench_sweep.py
	$(PY) bench/bench_projection.py
	$(PY) bench/bench_sidecar.py
	$(PY) bench/bench_fixed_cost.py
	$(PY) bench/bench_servicer.py
	$(PY) bench/bench_edge.py
	$(PY) bench/bench_loop_instructions.py
	$(PY) bench/bench_memory.py
	$(PY) bench/bench_load_shed.py
	$(PY) bench/accept_probe.py default extra:32 generic
	$(PY) bench/sched_probe.py '' '--shed-queue-ms 0'
	$(PY) bench/bench_cache.py
	$(PY) bench/bench_fanout.py
	$(PY) bench/bench_soak.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis dist $(NATIVE_DIR)/target
