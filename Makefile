# gpu-pool-scaler — everything starts from a fresh clone with `make run` or `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PROTO_OUT := scaler/_proto

.PHONY: run test fuzz mutate lint proto bench bench-week bench-sim bench-load bench-objective bench-contract bench-exit clean help

help:
	@echo "make run    - simulated pool + the real scaler on loopback (no cluster needed)"
	@echo "make test   - install everything tests need (venv, helm, vLLM CPU) and run them"
	@echo "make fuzz   - the property tests and fuzzers at FUZZ_SCALE (30) times their examples, at random (~20 min)"
	@echo "make mutate - mutation testing of scaler/core with mutmut (ARGS='scaler.core.ramp*' for one module: 5-60 min; the whole core, ~5,500 mutants, takes hours); survivors listed at the end"
	@echo "make lint   - ruff + mypy (package, tests, bench, tools, cluster scripts) + import contracts"
	@echo "make proto  - regenerate gRPC stubs from protos/externalscaler.proto"
	@echo "make bench  - parse speed, 500-target scrape cycle, 1-day pool simulation (bench/results/)"
	@echo "make bench-objective - latency objective + forecast: code/conv weeks, ServeGen 3 days, forecast-off runs, ServeGen seeds 7 and 3, coding seed 2, shuffled control, the oracle's frontier beyond the default headrooms where ours lies (~85 min on 2 cores)"
	@echo "make bench-contract  - the same objective runs with research checkpointing on SIGTERM in 60 s (the worker's contract; ~43 min on 2 cores)"
	@echo "make bench-exit      - the same objective runs with research that dies on SIGTERM (no handler: GPUs free in 5 s, work since the last checkpoint lost; ~36 min on 2 cores)"
	@echo "make bench-load - the real scaler under 500 targets + 1,000 RPS of KEDA calls (~3 min)"
	@echo "make cluster - real etcd/kube-apiserver/controller-manager/scheduler + KEDA, kwok GPU nodes"
	@echo "make cluster-down - stop it"
	@echo "make e2e    - scenarios on a fresh real cluster + KEDA + the chart (out/e2e/report.json)"

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# A venv made before 9e58523 has grpc-stubs, whose stub folder types-grpcio also writes.
	$(PY) -m pip uninstall --quiet --quiet --yes grpc-stubs
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

venv: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/gpu-pool-scaler demo $(ARGS)

# Redis (a binary only: tests start their own servers) and helm/vLLM (installed by the
# tests that use them into caches) are the services the tests need beyond the venv.
test: $(STAMP)
	bash tools/ensure-redis.sh
	$(PY) -m pytest -ra $(PYTEST_ARGS)

# The property tests and fuzzers at FUZZ_SCALE times their examples, at random (make test
# runs a fixed set): ~20 min on 2 cores at 30. A counterexample is printed with its input;
# pin it with @example in the test before fixing. The per-test timeout (300 s for make
# test) grows with the scale, 60 s per unit: at 60 one property test ran past 300 s on a
# busy machine and was reported as a failure.
FUZZ_SCALE ?= 30
fuzz: $(STAMP)
	FUZZ_SCALE=$(FUZZ_SCALE) $(PY) -m pytest -q -p no:cacheprovider --timeout=$$(( 60 * $(FUZZ_SCALE) + 300 )) tests/test_policy_properties.py tests/test_accounting_properties.py tests/test_forecast_properties.py tests/test_fuzz_exposition.py tests/test_exposition.py

# mutmut keeps its results in mutants/ and re-runs only what changed; `rm -rf mutants` starts
# over. `.venv/bin/mutmut show NAME` prints a survivor's diff.
mutate: $(STAMP)
	$(PY) -m pip install --quiet -e '.[mutate]'
	$(VENV)/bin/mutmut run --max-children 2 $(ARGS)
	$(VENV)/bin/mutmut results

lint: $(STAMP)
	$(VENV)/bin/ruff check scaler tests bench tools cluster
	$(VENV)/bin/ruff format --check scaler tests bench tools cluster
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# Stubs are generated with the pinned grpcio-tools/mypy-protobuf (pyproject: dev extra);
# tests/test_proto.py regenerates into a temp dir and fails on any drift.
proto: $(STAMP)
	$(PY) -m grpc_tools.protoc -I$(PROTO_OUT)=protos \
	  --python_out=. --grpc_python_out=. --mypy_out=. --mypy_grpc_out=. \
	  --plugin=protoc-gen-mypy=$(VENV)/bin/protoc-gen-mypy \
	  --plugin=protoc-gen-mypy_grpc=$(VENV)/bin/protoc-gen-mypy_grpc \
	  protos/externalscaler.proto

# Trace-driven pool simulator (docs/bench.md): 1 day, 64 GPUs, 4 GPUs/replica, 5 policies.
SIM_DAY := bench/results/azure-code-week-1d-64gpu
SIM_WEEK := bench/results/azure-code-week-7d-64gpu

CAPTURE := tests/data/vllm-0.32.0-cpu/metrics_after_load.txt

bench: $(STAMP)
	$(PY) -m bench.parse $(CAPTURE) | tee bench/results/parse.txt
	$(PY) -m bench.scrape_cycle --targets 500 --out bench/results/scrape_cycle.txt
	$(PY) -m bench.simulate --jobs 2 --out $(SIM_DAY)

bench-sim: $(STAMP)
	$(PY) -m bench.simulate --jobs 2 --out $(SIM_DAY) $(ARGS)

# Service under load (docs/operations.md): targets, scaler and KEDA clients as separate
# processes; results in bench/results/load-*.md. Not part of `make test`.
bench-load: $(STAMP)
	$(PY) -m bench.load $(ARGS)

bench-week: $(STAMP)
	$(PY) -m bench.simulate --jobs 2 --days 7 --out $(SIM_WEEK)

# Latency objective + forecast (docs/bench.md, "Objective-driven"): the issue-14 acceptance
# runs, ~85 min on 2 cores (the conversation week alone ~16). Objective 2.5 s (a vLLM bucket bound), scored from day 1.
# The last two runs extend the oracle's frontier where ours falls outside the default sweep
# (headrooms 1-1.5): coding seed 2 above the oracle's best attainment, ServeGen seed 3 below
# its lowest (a share read there was clamped: a bound, not a number).
OBJ := --slo 2.5 --adaptive-reserve 16
COMMA := ,
bench-objective: $(STAMP)
	$(PY) -m bench.simulate --jobs 2 --days 7 $(OBJ) --policies ours,static-peak,oracle --out bench/results/objective-azure-code-7d
	$(PY) -m bench.simulate --days 7 $(OBJ) --policies ours --no-forecast --out bench/results/objective-azure-code-7d-reactive
	$(PY) -m bench.simulate --jobs 2 --days 7 $(OBJ) --policies ours,static-peak,oracle --trace azure-conv-week --out bench/results/objective-azure-conv-7d
	$(PY) -m bench.simulate --days 7 $(OBJ) --policies ours --no-forecast --trace azure-conv-week --out bench/results/objective-azure-conv-7d-reactive
	$(PY) -m bench.simulate --jobs 2 --days 3 $(OBJ) --policies ours,static-peak,oracle --trace servegen-large --out bench/results/objective-servegen-large-3d
	$(PY) -m bench.simulate --days 3 $(OBJ) --policies ours --no-forecast --trace servegen-large --out bench/results/objective-servegen-large-3d-reactive
	$(PY) -m bench.simulate --jobs 2 --days 3 $(OBJ) --seed 7 --policies ours,static-peak,oracle --trace servegen-large --out bench/results/objective-servegen-large-3d-seed7
	$(PY) -m bench.simulate --days 3 $(OBJ) --seed 7 --policies ours --no-forecast --trace servegen-large --out bench/results/objective-servegen-large-3d-seed7-reactive
	$(PY) -m bench.simulate --jobs 2 --days 6 $(OBJ) --policies ours --shuffle-days --out bench/results/objective-azure-code-6d-shuffled
	$(PY) -m bench.simulate --jobs 2 --days 6 $(OBJ) --policies ours --shuffle-days --no-forecast --out bench/results/objective-azure-code-6d-shuffled-reactive
	$(PY) -m bench.simulate --jobs 2 --days 7 $(OBJ) --seed 2 --policies ours,oracle --out bench/results/objective-azure-code-7d-seed2
	$(PY) -m bench.simulate --jobs 2 --days 3 $(OBJ) --seed 3 --policies ours,static-peak,oracle --trace servegen-large --out bench/results/objective-servegen-large-3d-seed3
	$(PY) -m bench.simulate --days 7 $(OBJ) --seed 2 --policies oracle --oracle-headrooms 1.6,1.75 --out bench/results/objective-azure-code-7d-seed2-oracle-high
	$(PY) -m bench.simulate --days 3 $(OBJ) --seed 3 --policies oracle --oracle-headrooms 0.85,0.9,0.95 --trace servegen-large --out bench/results/objective-servegen-large-3d-seed3-oracle-low

# The objective runs with other research behaviour on preemption (docs/bench.md): $(1) the
# flags, $(2) the results' prefix.
define research_mode_runs
	$(PY) -m bench.simulate --jobs 2 --days 7 $(OBJ) $(1) --out bench/results/$(2)-azure-code-7d
	$(PY) -m bench.simulate --jobs 2 --days 7 $(OBJ) $(1) --trace azure-conv-week --out bench/results/$(2)-azure-conv-7d
	$(PY) -m bench.simulate --jobs 2 --days 3 $(OBJ) $(1) --trace servegen-large --out bench/results/$(2)-servegen-large-3d
	$(PY) -m bench.simulate --jobs 2 --days 3 $(OBJ) $(1) --seed 7 --trace servegen-large --out bench/results/$(2)-servegen-large-3d-seed7
	$(PY) -m bench.simulate --jobs 2 --days 3 $(OBJ) $(1) --seed 3 --trace servegen-large --out bench/results/$(2)-servegen-large-3d-seed3
endef

# Research that honours the chart's contract ("Research that checkpoints on SIGTERM"):
# preempted pods write a checkpoint in 60 s and free their GPUs, instead of holding them
# the whole 600-s grace and losing the work since the last one.
bench-contract: $(STAMP)
	$(call research_mode_runs,--checkpoint-on-sigterm 60 --policies ours$(COMMA)static-peak$(COMMA)oracle,contract)

# Research commands without a SIGTERM handler ("Research that exits on SIGTERM"): the
# worker forwards the signal, the command dies at once, the pod is gone in seconds and the
# work since the last checkpoint is lost. Static peak lends nothing: not re-run.
bench-exit: $(STAMP)
	$(call research_mode_runs,--exit-on-sigterm 5 --policies ours$(COMMA)oracle,exit)

# The scaler image and the chart package (docs/install.md). `make image` needs a docker
# engine (none on the CI machines: it is not part of `make test`); it pushes only when
# REGISTRY is set, e.g. `make image REGISTRY=registry.example.com/ml`. The default TAG is
# the package version, which is also the chart's appVersion (the image tag it deploys).
REGISTRY ?=
IMAGE ?= gpu-pool-scaler
TAG ?= $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE_REF := $(if $(REGISTRY),$(patsubst %/,%,$(REGISTRY))/)$(IMAGE):$(TAG)
CHART_DIR := charts/gpu-pool-scaler
CHART_OUT ?= dist

.PHONY: image chart-package

image:
	docker build -t $(IMAGE_REF) .
	$(if $(REGISTRY),docker push $(IMAGE_REF),@echo "REGISTRY unset: built $(IMAGE_REF) locally, not pushed")

# helm lint (strict, with the minimal example values), then `helm package` into CHART_OUT;
# push it with `helm push $(CHART_OUT)/gpu-pool-scaler-<version>.tgz oci://REGISTRY/charts`.
chart-package:
	@helm="$$(bash tools/install-helm.sh | tail -n 1)" && \
	  "$$helm" lint --strict $(CHART_DIR) -f $(CHART_DIR)/ci/minimal-values.yaml && \
	  mkdir -p $(CHART_OUT) && "$$helm" package $(CHART_DIR) -d $(CHART_OUT)

clean:
	rm -rf $(VENV) .cache .pytest_cache .mypy_cache .ruff_cache .hypothesis

# A real local control plane + real KEDA with kwok GPU nodes: make cluster / cluster-down.
include cluster/cluster.mk
