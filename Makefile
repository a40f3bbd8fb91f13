# Everything a fresh Debian machine needs, installed idempotently (fast when already done).
#   make run    the users' test: bank and append on the safekeeper cluster for 60 s, and its report
#   make test   lint and the whole test suite (unit, integration against Docker, end to end)
#   make bench  benchmarks that print figures

SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)
DEBS := debootstrap iproute2 openjdk-17-jre-headless fuse3
BENCH_DEBS := postgresql-15
TEST_DEBS := chromium zookeeper postgresql-15  # Chromium for tests/browser; ZooKeeper and Postgres for the Manatee sitters

.PHONY: setup python debs test-debs image test-images spark-archive powerfs toxiproxy run test lint bench clean-clusters

setup: python debs image spark-archive powerfs toxiproxy

python: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || python3 -m venv $(VENV)
	$(BIN)/pip install -q -e '.[dev]'
	@rm -f $(VENV)/.installed-* && touch $@

# $(call install_debs,PACKAGES): apt-get install those of PACKAGES that are not installed yet.
define install_debs
	@missing=$$(for p in $(1); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then echo "installing $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi
endef

debs:
	$(call install_debs,$(DEBS))

test-debs:
	$(call install_debs,$(TEST_DEBS))

image: python debs
	$(BIN)/harness cluster image

# Every kind's image, built before the suite rather than inside the first test that needs one, so
# that a test's time is its own and the log shows each build.
test-images: image
	$(BIN)/harness cluster image --all

# The power layer under the nodes' state (clusters/power.py): a FUSE filesystem, built by cargo
# (in a target directory every checkout shares: clusters/crates.py).
powerfs: python
	$(BIN)/python -m clusters.crates powerfs

# The connection faults' proxy (clusters/toxiproxy_server.py): Toxiproxy's API over noxious.
toxiproxy: python
	$(BIN)/python -m clusters.crates toxiproxy

# Spark's classes dumped once (about a minute), mapped by every later JVM: it starts in half the time.
spark-archive: python debs
	$(BIN)/python -m harness.spark_archive

run: setup
	$(BIN)/harness run

lint: python
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

# Three workers, each given whole units of work (tests/conftest.py says which, in which order): most
# of the suite waits on clusters, and those waits overlap well even on two cores. Then the tests
# that time a cluster's recovery, with the machine to themselves (a cluster starved of CPU by the
# others' recovers late, which is no finding). The slowest tests are listed at the end of each phase,
# so that a CI log says where its time went. PYTEST_ARGS adds options, e.g.
# `make test PYTEST_ARGS="-k churn"`. Before them, the packages (apt holds one lock), then the rest
# of the set-up side by side: the Spark archive's JVM, cargo, the images' checks and lint each
# wait on something much of the time.
test: python debs test-debs
	$(MAKE) --no-print-directory -j4 setup test-images lint
	$(BIN)/pytest -q -n 3 --dist loadscope --no-loadscope-reorder -m "not alone" --durations=25 $(PYTEST_ARGS)
	$(BIN)/pytest -q -m alone --durations=5 $(PYTEST_ARGS)

bench: setup
	@dpkg-query -W -f='$${Status}\n' $(BENCH_DEBS) 2>/dev/null | grep -q 'ok installed' || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(BENCH_DEBS) >/dev/null)
	$(BIN)/python bench/bank_vs_pgbench.py
	$(BIN)/python bench/commit_latency.py
	$(BIN)/python bench/listappend_scale.py
	$(BIN)/python bench/schedule_odds.py

clean-clusters: python
	$(BIN)/harness cluster down
