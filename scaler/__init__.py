"""gpu-pool-scaler: a KEDA external scaler for vLLM pools that lends idle GPUs to research."""

__version__ = "0.1.0"
