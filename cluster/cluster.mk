# Local real control plane + real KEDA with kwok fake GPU nodes (see cluster/README.md).
# Included by the main Makefile; standalone: make -f cluster/cluster.mk cluster
NODES ?= 16
GPUS_PER_NODE ?= 4
CLUSTER_STATE ?= out/cluster
CLUSTER_UP_ARGS ?=

.PHONY: cluster cluster-build cluster-down cluster-status cluster-smoke e2e

cluster-build:
	cluster/build.sh

cluster: cluster-build
	cluster/up --nodes $(NODES) --gpus-per-node $(GPUS_PER_NODE) --state-dir $(CLUSTER_STATE) $(CLUSTER_UP_ARGS)

cluster-down:
	cluster/down --state-dir $(CLUSTER_STATE)

cluster-status:
	cluster/status --state-dir $(CLUSTER_STATE)

cluster-smoke:
	cluster/smoke --state-dir $(CLUSTER_STATE)

# End to end: a fresh cluster, the chart via real helm, the scaler with the chart's config,
# simulated engines at the pod IPs; scenarios asserted through the API server; report in
# out/e2e/report.json; always torn down (E2E_ARGS=--keep to leave it up).
E2E_ARGS ?=
e2e: venv cluster-build
	.venv/bin/python cluster/e2e.py $(E2E_ARGS)
