# Local real control plane + real KEDA with kwok fake GPU nodes (see cluster/README.md).
# Included by the main Makefile; standalone: make -f cluster/cluster.mk cluster
NODES ?= 16
GPUS_PER_NODE ?= 4
CLUSTER_STATE ?= out/cluster
CLUSTER_UP_ARGS ?=

.PHONY: cluster cluster-build cluster-down cluster-status cluster-smoke

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
