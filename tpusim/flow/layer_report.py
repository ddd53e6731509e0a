"""The cosim's per-layer accuracy files: ``layers_accuracy.csv`` (one row per layer,
tpucompile.fp32.LAYER_COLUMNS) and ``layers_accuracy.png`` (SQNR of every layer against FP32, in
graph order, with the saturated share of its int8 codes; matplotlib, Agg backend)."""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from tpusim.arch.fileio import write_text_atomic

__all__ = ["write_csv", "write_png", "summary"]


def write_csv(rows: list[dict], columns, path: Path) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r[k] is None else r[k]) for k in columns})
    write_text_atomic(path, buf.getvalue())


def write_png(rows: list[dict], title: str, path: Path) -> None:
    """SQNR (dB) per layer, a line with markers; exact layers (infinite SQNR) drawn at the top of
    the axis; the saturated share on a second axis."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    xs = list(range(len(rows)))
    finite = [r["sqnr_db"] for r in rows if math.isfinite(r["sqnr_db"])]
    top = (max(finite) if finite else 60.0) + 5
    ys = [r["sqnr_db"] if math.isfinite(r["sqnr_db"]) else top for r in rows]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.12 * len(rows)), 4.0), dpi=100)
    ax.plot(xs, ys, marker="o", markersize=3, linewidth=1, label="SQNR vs FP32")
    ax.set_xlabel("layer (graph order)")
    ax.set_ylabel("SQNR vs FP32 (dB)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax2 = ax.twinx()
    ax2.bar(xs, [100 * r["saturated_fraction"] for r in rows], alpha=0.25, color="tab:red", label="saturated codes")
    ax2.set_ylabel("saturated int8 codes (%)")
    worst = min(range(len(rows)), key=lambda i: ys[i]) if rows else None
    if worst is not None:
        ax.annotate(rows[worst]["layer"], (worst, ys[worst]), fontsize=7, xytext=(4, -10), textcoords="offset points")
    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(path)


#: a layer is "below threshold" under either (TPU-MLIR's compare uses cosine and SQNR-like limits)
MIN_COSINE = 0.99
MIN_SQNR_DB = 30.0
_KEYS = ("layer", "op", "onnx_tensor", "sqnr_db", "cosine", "saturated_fraction")


def below(r: dict, min_cosine: float = MIN_COSINE, min_sqnr_db: float = MIN_SQNR_DB) -> bool:
    """The layer's SQNR is under ``min_sqnr_db`` or its cosine (when defined) under ``min_cosine``."""
    return r["sqnr_db"] < min_sqnr_db or (r["cosine"] is not None and r["cosine"] < min_cosine)


def summary(rows: list[dict], csv_path: Path, png_path: Path) -> dict:
    """The verdict's ``layer_accuracy``: layer count, the lowest-SQNR layer, the first layer in
    graph order below the thresholds (None if none: where the error starts to grow), the files."""
    if not rows:
        return {}
    w = min(rows, key=lambda r: r["sqnr_db"])
    first = next((r for r in rows if below(r)), None)
    return {"layers": len(rows), "csv": str(csv_path), "png": str(png_path),
            "worst": {k: w[k] for k in _KEYS},
            "first_below": None if first is None else {k: first[k] for k in _KEYS},
            "thresholds": {"cosine": MIN_COSINE, "sqnr_db": MIN_SQNR_DB}}
