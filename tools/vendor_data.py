"""Re-derive the vendored data from the raw sources (a maintainer's tool, never run by the
product, the bench or the tests, which read only the repository's own copies).

    python tools/vendor_data.py --raw DIR

DIR holds the raw material: traces/ (Azure 2023 CSVs, Azure 2024 digitized rate curves,
ServeGen aggregates), profiles/derived_linear_and_allreduce_per_forward_ms.csv (vidur),
fixtures/vllm-0.32.0-cpu/*.txt (real vLLM captures) and schemas/keda/*.yaml (KEDA CRDs).
Each output folder's README says what was kept and how it was cut. Floats are written with
repr() so the simulator computes bit-identical inputs from the compact copies.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
SIM_DATA = ROOT / "scaler" / "sim" / "data"
TEST_DATA = ROOT / "tests" / "data"


def _write(path: Path, header: list[str], rows: Sequence[Sequence[object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        for r in rows:
            w.writerow([repr(v) if isinstance(v, float) else v for v in r])
    print(f"{path.relative_to(ROOT)}: {len(rows)} rows, {path.stat().st_size:,} bytes")


def azure2023(raw: Path, kind: str) -> None:
    rows = []
    t0 = None
    with (raw / "traces" / f"AzureLLMInferenceTrace_{kind}.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            ts = dt.datetime.fromisoformat(row["TIMESTAMP"][:26]).timestamp()
            t0 = ts if t0 is None else t0
            rows.append([ts - t0, int(row["ContextTokens"]), int(row["GeneratedTokens"])])
    _write(
        SIM_DATA / "traces" / f"azure2023_{kind}_requests.csv",
        ["t_s", "prompt_tokens", "output_tokens"],
        rows,
    )


def azure2024(raw: Path, kind: str) -> None:
    rows = []
    with (raw / "traces" / f"azure2024_{kind}_1week_rate_digitized.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            m = float(row["req_per_min_mid"])
            scale = float(row["req_per_min_mid_scaled"]) / m if m > 0 else 1.0
            rows.append(
                [
                    float(row["start_min_offset"]) * 60.0,
                    float(row["req_per_s_mid_scaled"]),
                    float(row["req_per_min_low"]) * scale / 60.0,
                    float(row["req_per_min_high"]) * scale / 60.0,
                ]
            )
    _write(
        SIM_DATA / "traces" / f"azure2024_{kind}_week_rate.csv",
        ["t_s", "rps_mid", "rps_low", "rps_high"],
        rows,
    )


def servegen(raw: Path) -> None:
    cols = ["m_large_rps", "m_mid_rps", "m_small_rps"]
    rows = []
    with (raw / "traces" / "servegen_language_2week_rate_10min.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            rows.append([float(row["window_start_s"]), *(float(row[c]) for c in cols)])
    _write(SIM_DATA / "traces" / "servegen_language_2week_rate.csv", ["t_s", *cols], rows)
    rows = []
    with (raw / "traces" / "servegen_reason_mm_1day_rate_10min.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            rows.append([float(row["window_start_s"]), float(row["deepseek_r1_rps"])])
    _write(SIM_DATA / "traces" / "servegen_r1_1day_rate.csv", ["t_s", "deepseek_r1_rps"], rows)


def profiles(raw: Path) -> None:
    rows = []
    src = raw / "profiles" / "derived_linear_and_allreduce_per_forward_ms.csv"
    with src.open(newline="") as f:
        for row in csv.DictReader(f):
            rows.append(
                [
                    row["gpu"],
                    row["model"],
                    int(row["tp"]),
                    int(row["num_tokens"]),
                    row["sum_ms_excluding_attention"],  # kept as printed upstream
                ]
            )
    _write(
        SIM_DATA / "profiles" / "per_forward_ms.csv",
        ["gpu", "model", "tp", "num_tokens", "sum_ms_excluding_attention"],
        rows,
    )


def _strip_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_strip_descriptions(v) for v in node]
    return node


def keda_crds(raw: Path) -> None:
    out = TEST_DATA / "keda-crds"
    out.mkdir(parents=True, exist_ok=True)
    for f in sorted((raw / "schemas" / "keda").glob("*.yaml")):
        crd = yaml.safe_load(f.read_text())
        slim = {
            "apiVersion": crd["apiVersion"],
            "kind": crd["kind"],
            "metadata": {"name": crd["metadata"]["name"]},
            "spec": _strip_descriptions(crd["spec"]),
        }
        dst = out / f.name
        dst.write_text(yaml.safe_dump(slim, sort_keys=False, width=100))
        print(f"{dst.relative_to(ROOT)}: {f.stat().st_size:,} -> {dst.stat().st_size:,} bytes")


def captures(raw: Path) -> None:
    out = TEST_DATA / "vllm-0.32.0-cpu"
    out.mkdir(parents=True, exist_ok=True)
    for f in sorted((raw / "fixtures" / "vllm-0.32.0-cpu").glob("*.txt")):
        shutil.copyfile(f, out / f.name)
        print(f"{(out / f.name).relative_to(ROOT)}: unmodified, {f.stat().st_size:,} bytes")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--raw", type=Path, required=True, help="folder with the raw material")
    raw = ap.parse_args().raw
    for kind in ("code", "conv"):
        azure2023(raw, kind)
        azure2024(raw, kind)
    servegen(raw)
    profiles(raw)
    keda_crds(raw)
    captures(raw)


if __name__ == "__main__":
    main()
