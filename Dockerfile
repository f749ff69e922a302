# gpu-pool-scaler image: KEDA external scaler for a shared GPU pool.
# Build and push: make image REGISTRY=registry.example.com/ml (tag: the package version,
# which the chart deploys by default; docs/install.md). Or: docker build -t gpu-pool-scaler:TAG .
# The image is the server only; `--build-arg EXTRAS=sim` adds the simulator (numpy,
# matplotlib, rich) so that `gpu-pool-scaler demo` runs in it too.
# The Helm chart runs it as `gpu-pool-scaler serve --config /etc/gpu-pool-scaler/config.yaml`
# with a read-only root filesystem as uid/gid 10001 (charts/gpu-pool-scaler/values.yaml).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG EXTRAS=""

# ---- build: a self-contained venv with the package and its pinned-range deps ----------
FROM ${PYTHON_IMAGE} AS build
ARG EXTRAS
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# README is the package's long description (pyproject `readme`); the glob keeps the build
# working in a tree without it.
COPY pyproject.toml README.md* ./
COPY scaler ./scaler
# The package is this source tree (".", optionally with extras): nothing to pin here.
# hadolint ignore=DL3013
RUN pip install --no-compile ".${EXTRAS:+[${EXTRAS}]}" \
    # Bytecode now: the runtime root filesystem is read-only, so it could not be cached later.
 && python -m compileall -q -j 0 /opt/venv/lib \
 && pip uninstall -y pip setuptools wheel

# ---- runtime: only the venv on a slim base, numeric non-root user ---------------------
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="gpu-pool-scaler" \
      org.opencontainers.image.description="KEDA external scaler: vLLM autoscaling on engine signals, idle GPUs lent to research Jobs" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
COPY --from=build /opt/venv /opt/venv
# Numeric uid:gid (no passwd entry needed) so Kubernetes can verify runAsNonRoot.
USER 10001:10001
# gRPC (KEDA ExternalScaler + grpc.health.v1), HTTP (/metrics /healthz /readyz).
EXPOSE 50051 8080
ENTRYPOINT ["gpu-pool-scaler"]
CMD ["serve", "--config", "/etc/gpu-pool-scaler/config.yaml"]
