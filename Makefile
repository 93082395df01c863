# The front door. `make help` lists the targets; `make demo` and `make test` are all a newcomer needs.
# Every target that runs project code first runs `setup`, which does nothing when nothing changed.

.DEFAULT_GOAL := help
SHELL := /bin/bash
BIN := .venv/bin
# Test processes: each has its own broker and Spark driver (Spark's planning is single-threaded).
TEST_WORKERS ?= 2
# The tiers with brokers stop after this many failures (the workers finish the tests they hold);
# `make test MAXFAIL=0` runs every test whatever fails.
MAXFAIL ?= 1

# The JUnit tests' cases, written by the Python reference (tests/jvm_cases.py); git-ignored.
JVM_CASES ?= .cache/jvm-cases

.PHONY: help setup demo test test-unit test-jvm test-integration check kafka-start kafka-stop bench soak clean distclean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  make %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

setup: ## create .venv, install Python deps, copy the Kafka and Spark jars, build jvm/state with Maven (only what changed)
	@bash scripts/setup.sh

demo: setup ## run the demo: broker, routes, messages routed end to end by the Spark job
	$(BIN)/router demo

test: setup ## run all tests: the unit tier first (fails fast), then integration (real Kafka, Spark), e2e, fault tier
	@s=$$SECONDS; $(MAKE) --no-print-directory test-unit && echo "make test: the unit tier took $$((SECONDS - s)) s"
	@s=$$SECONDS; $(MAKE) --no-print-directory test-integration && echo "make test: the integration tiers took $$((SECONDS - s)) s"

test-unit: setup test-jvm ## the unit tier, in seconds: Python's (no Kafka, no Spark) and the JVM half's JUnit tests
	@# A broken rule or contract fails here, before any broker starts.
	$(BIN)/pytest -q -n $(TEST_WORKERS) tests/unit

test-jvm: setup ## the JUnit tests of jvm/state (no Spark): the Python reference writes cases, the Java replays them
	$(BIN)/python -m tests.jvm_cases $(JVM_CASES)
	@# Maven's own lines go to a log, shown when a test fails; surefire's reports give the count.
	@if mvn -q -B -f jvm/state/pom.xml test -Drouter.cases=$(abspath $(JVM_CASES)) >$(JVM_CASES)/mvn-test.log 2>&1; \
		then cat jvm/state/target/surefire-reports/*.txt | grep -h "Tests run" | sed 's/^/junit: /'; \
		else cat $(JVM_CASES)/mvn-test.log; echo "junit: failed (log above, also in $(JVM_CASES)/mvn-test.log)" >&2; exit 1; fi

test-integration: setup ## the tiers with brokers and Spark: integration, e2e and the fault tier
	@# The tests that bound by the clock when a batch or a retry comes run first, one at a time:
	@# beside another worker's fault test, on 2 cores, a batch can start a second late.
	$(BIN)/pytest -q -n 0 -m timing --maxfail=$(MAXFAIL) tests/integration tests/e2e
	@# The rest in one session (tests/conftest.py orders it): one worker starts on the two longest
	@# tests while the other runs the short ones, then the rest longest first; --maxschedchunk 1:
	@# a worker takes the next test when it is free (in chunks, the first would get every fault test).
	@# --maxfail: a failure stops the session early. --durations names the slowest.
	$(BIN)/pytest -q -n $(TEST_WORKERS) --maxschedchunk 1 --maxfail=$(MAXFAIL) --durations=20 -m "not timing" tests/integration tests/e2e

check: setup ## lint and type-check: ruff and mypy
	$(BIN)/ruff check .
	$(BIN)/mypy

kafka-start: setup ## start the embedded Kafka broker on 127.0.0.1:19092 (state in .state/kafka)
	$(BIN)/router kafka start

kafka-stop: ## stop the embedded Kafka broker
	$(BIN)/router kafka stop

bench: setup ## measure the router against the transport, a pass-through and a Python loop (bench/run.py, 20-30 min)
	$(BIN)/python -m bench.run

SOAK_MINUTES ?= 20
SOAK_OPTIONS ?=
soak: setup ## run `router run` under a steady load and sample what would grow if it leaked (bench/soak.py, SOAK_MINUTES=20; SOAK_OPTIONS for more, as --native-memory)
	$(BIN)/python -m bench.soak --minutes $(SOAK_MINUTES) $(SOAK_OPTIONS) --out bench/SOAK.md

clean: ## stop the broker; delete .state, checkpoints and tool caches (keeps .venv and the jars)
	@if [ -x $(BIN)/router ]; then $(BIN)/router kafka stop || true; fi
	rm -rf .state checkpoints spark-warehouse metastore_db derby.log .pytest_cache .mypy_cache .ruff_cache .hypothesis
	rm -rf jvm/state/target $(JVM_CASES)
	find . -path ./.venv -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean ## clean, then delete .venv and .cache (the next setup starts from scratch)
	rm -rf .venv .cache
