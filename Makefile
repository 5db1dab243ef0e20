# The two commands a newcomer needs: `make preview` and `make test`.
SHELL := /bin/bash
export PATH := $(CURDIR)/.tools/bin:$(PATH)

.PHONY: setup preview test check lint bench fuzz dev package clean vendor goldens

setup:
	@hack/setup.sh

## Full local preview of every example: no cluster needed.
## Runtime dependencies only (no Go build, no dev extras); summary on screen, YAML in build/.
preview:
	@hack/setup.sh runtime
	@.venv/bin/python hack/preview.py

## Lint and the whole test suite, with the real Crossplane CLI, Prometheus and kube-apiserver.
test: setup
	@hack/setup-test.sh
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy
	.venv/bin/pytest -n 2 --dist loadgroup -q

# What needs a live control plane, an image build or a real engine: in `make test` only.
LIVE_TESTS := tests/e2e tests/images tests/engine

## The inner loop: lint, types and every test that needs no live control plane (`make test`
## runs these and the rest).
check: setup
	@hack/setup-test.sh
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy
	.venv/bin/pytest -n 2 --dist loadgroup -q $(addprefix --ignore=,$(LIVE_TESTS))

## Rewrite the golden renders (tests/golden/: `plnt render --tree -r` of every example) and the
## function tests' whole responses (tests/functions/responses/).
goldens: setup
	.venv/bin/python -m tests.goldens

## Lint alone: the same checks `make test` runs first.
lint: setup
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy

## A live control plane to try plnt on (Crossplane, provider-kubernetes, plnt's functions, a
## workload cluster), in a private network namespace, until Ctrl-C. Needs root.
dev: setup
	@hack/setup-test.sh
	.venv/bin/python -m tests.e2e.stack

## Every package into dist/: the Configuration xpkg, one function xpkg per function (its runtime
## image embedded) and the reconciler's image tarball. No Docker engine; needs root (mmdebstrap,
## chroot). The Debian base is cached in .tools/cache, the rest in build/package.
package: setup
	@hack/install-image-tools.sh
	.venv/bin/python hack/package.py

bench: setup
	.venv/bin/plnt bench

## 10,000 examples where a normal run takes 60-300: each test gets up to 3 hours.
fuzz: setup
	PLNT_FUZZ_EXAMPLES=10000 .venv/bin/pytest -q --timeout 10800 tests/fuzz tests/cel

## Re-copy the vendored CRDs and seeds from ../shared (or SRC=dir) and rewrite third_party/SOURCES.
vendor:
	python3 hack/vendor.py refresh $(SRC)

clean:
	rm -rf .venv .tools build dist
