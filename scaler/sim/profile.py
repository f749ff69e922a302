"""Per-iteration latency of one vLLM replica, from measured kernel profiles plus analytics.

One forward pass (a decode step, or a chunked-prefill step mixing decode and prefill
tokens) of a tensor-parallel replica takes

    T = linear(n) + allreduce(n)            measured: profiles/derived_linear_and_allreduce_
                                            per_forward_ms.csv (vidur, per GPU model / TP)
      + attn_decode(Σ context of decoders)  KV bytes read / (HBM bandwidth × efficiency)
      + attn_prefill(chunk, context)        4·layers·chunk·ctx·d_head·heads / TP FLOPs
                                            / (peak TFLOPs × efficiency)
      + overhead                            LM head, sampling, scheduler CPU (fixed, ms)

where n = tokens in the pass (decode tokens + prefill chunk). The attention kernels are not
in the public profile (upstream attention.csv is absent), hence the analytical terms; the
efficiencies and overhead are stated in `GpuSpec` / `ReplicaSpec` and in docs/bench.md.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from functools import cache

import numpy as np
import numpy.typing as npt

from scaler.sim.data import data_file

DERIVED_CSV = "per_forward_ms.csv"

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str  # as in the profile CSV's `model` column
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    params: float  # parameter count (weights in bf16: 2 bytes each)

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V, every layer, bf16: what one token's KV cache occupies over all GPUs."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2


@dataclass(frozen=True, slots=True)
class GpuSpec:
    name: str  # as in the profile CSV's `gpu` column
    hbm_bytes: float
    hbm_bytes_per_s: float
    bf16_flops: float  # dense peak
    hbm_efficiency: float = 0.7  # achieved share of HBM bandwidth in paged decode attention
    flops_efficiency: float = 0.5  # achieved share of peak in prefill attention


GPUS = {
    "a100": GpuSpec("a100", 80e9, 2.039e12, 312e12),
    "h100": GpuSpec("h100", 80e9, 3.35e12, 989e12),
}
MODELS = {
    "llama3-70b": ModelSpec("Meta-Llama-3-70B", 80, 8192, 64, 8, 70.6e9),
    "llama3-8b": ModelSpec("Meta-Llama-3-8B", 32, 4096, 32, 8, 8.0e9),
    "llama2-70b": ModelSpec("Llama-2-70b-hf", 80, 8192, 64, 8, 69.0e9),
    "llama2-7b": ModelSpec("Llama-2-7b-hf", 32, 4096, 32, 32, 6.7e9),
}
# Which GPU each model was profiled on (the public profiles pair them this way).
PROFILED_ON = {
    "llama3-70b": "a100",
    "llama3-8b": "a100",
    "llama2-70b": "h100",
    "llama2-7b": "h100",
}


@cache
def _linear_table(gpu: str, model: str, tp: int) -> tuple[FloatArray, FloatArray]:
    path = data_file("profiles", DERIVED_CSV)
    xs: list[float] = []
    ys: list[float] = []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            if row["gpu"] == gpu and row["model"] == model and int(row["tp"]) == tp:
                xs.append(float(row["num_tokens"]))
                ys.append(float(row["sum_ms_excluding_attention"]))
    if not xs:
        raise ValueError(f"no profile rows for gpu={gpu} model={model} tp={tp} in {path}")
    order = np.argsort(xs)
    return np.asarray(xs)[order], np.asarray(ys)[order] / 1000.0


@dataclass(frozen=True)
class ReplicaSpec:
    """One vLLM replica: model, GPU, tensor parallelism and the engine's knobs."""

    model_key: str = "llama3-70b"
    tp: int = 4  # GPUs per replica
    max_num_seqs: int = 256  # vLLM default
    max_num_batched_tokens: int = 2048  # chunked-prefill token budget per pass
    gpu_memory_utilization: float = 0.9  # vLLM default
    activation_bytes_per_gpu: float = 3e9  # activations, CUDA graphs, NCCL buffers
    overhead_s: float = 0.003  # LM head + sampling + scheduler CPU per pass
    cold_start_s: float = 120.0  # pod start + weights load + warm-up
    gpu_key: str | None = None  # default: the GPU the model was profiled on
    _table: tuple[FloatArray, FloatArray] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.model_key not in MODELS:
            raise ValueError(f"unknown model {self.model_key!r}; known: {sorted(MODELS)}")
        object.__setattr__(self, "_table", _linear_table(self.gpu.name, self.model.name, self.tp))
        if self.kv_capacity_tokens <= 0:
            raise ValueError(f"{self.model_key} does not fit on {self.tp} × {self.gpu.name}")

    @property
    def model(self) -> ModelSpec:
        return MODELS[self.model_key]

    @property
    def gpu(self) -> GpuSpec:
        return GPUS[self.gpu_key or PROFILED_ON[self.model_key]]

    @property
    def kv_capacity_tokens(self) -> int:
        """KV-cache tokens: (HBM × utilisation − weights − activations) / bytes per token."""
        free = (
            self.gpu.hbm_bytes * self.gpu_memory_utilization * self.tp
            - self.model.params * 2
            - self.activation_bytes_per_gpu * self.tp
        )
        return int(free // self.model.kv_bytes_per_token)

    def iteration_s(
        self,
        tokens: FloatArray | float,
        decode_ctx: FloatArray | float,
        prefill_tokens: FloatArray | float,
        prefill_ctx: FloatArray | float,
    ) -> FloatArray:
        """Seconds of one forward pass (vectorised over replicas).

        tokens: tokens in the pass; decode_ctx: Σ KV tokens read by the decoding sequences;
        prefill_tokens: prefill tokens in the pass; prefill_ctx: mean context they attend to.
        """
        m, g = self.model, self.gpu
        xs, ys = self._table
        lin = np.interp(np.maximum(tokens, 1.0), xs, ys)
        # Beyond the profiled range the linear layers are compute-bound: extrapolate linearly.
        over = np.maximum(np.asarray(tokens, dtype=float) - xs[-1], 0.0)
        lin = lin + over * (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        kv_read = np.asarray(decode_ctx, dtype=float) * (m.kv_bytes_per_token / self.tp)
        attn_dec = kv_read / (g.hbm_bytes_per_s * g.hbm_efficiency)
        flops = 4.0 * m.layers * np.asarray(prefill_tokens) * np.asarray(prefill_ctx) * m.hidden
        attn_pre = flops / self.tp / (g.bf16_flops * g.flops_efficiency)
        return np.asarray(lin + attn_dec + attn_pre + self.overhead_s, dtype=float)
