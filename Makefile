# The two commands of the README: `make demo` and `make test`. Everything else is a helper.
UV ?= uv
export UV_PYTHON ?= 3.11
# Two pytest workers: the test bed's tests (one cluster) on one, everything else on the other
# (tests/conftest.py), in the order conftest sorts them (--no-loadscope-reorder: xdist would
# otherwise hand out the largest groups first). TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= 2

.PHONY: setup provision demo demo-cluster test lint typecheck render check-rendered unit cluster cluster-down

setup:  ## install uv's environment (the project, its dev tools) from uv.lock
	@command -v $(UV) >/dev/null || python3 -m pip install --quiet uv
	$(UV) sync --frozen

provision:  ## what the real-server tests need: Debian packages, the Go builds, the images (idempotent)
	bash scripts/provision.sh

demo: setup  ## the embedded default: run radixfleet on this machine and write a report to out/
	$(UV) run radixfleet demo --out out/demo

demo-cluster: setup provision  ## the same demo on a one-node Kubernetes built here: operator, entry, routers, predictors as pods
	$(UV) run python -m testbed demo --out out/demo-cluster

render: setup  ## re-render runtimes/ and inferenceservices/ from the catalog
	$(UV) run radixfleet render

lint: setup
	$(UV) run ruff check .
	$(UV) run ruff format --check .
	$(UV) run lint-imports

typecheck: setup
	$(UV) run mypy

test: provision lint typecheck  ## everything CI runs: provision, lint, types, and the whole test suite
	$(UV) run pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=30

cluster: setup provision  ## a one-node Kubernetes 1.35 on this machine, left running (kubeconfig: out/cluster/kubeconfig)
	$(UV) run python -m testbed up --out out/cluster

cluster-down: setup  ## stop the cluster of `make cluster`; its logs stay in out/cluster/logs
	$(UV) run python -m testbed down --out out/cluster
