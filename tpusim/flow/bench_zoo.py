"""`make bench-zoo`: every built-in model through cosim (SimPy, no RTL) on one config, one table.

    python -m tpusim.flow.bench_zoo [--hw seed] [--models a,b,...] [--out runs/zoo] [--json FILE]

Per model: load s (the ONNX file, or a built-in's seeded weights or its quantize_static QDQ
version, and its images), compile s (compile_onnx with its IR dumps, the binary written), SimPy s, cycles, utilisation, cosine / SQNR of the int8 output against
onnxruntime FP32, top-1 / top-5 agreement, and the verdict (golden = SimPy on every layer); a
model the compiler refuses gets its one-line reason instead. Budgets (issue 9): compile <= 5 s and
SimPy <= 30 s per model on seed; the figures are printed, not asserted: each is marked within or
over its budget (and the JSON rows carry ``compile_within`` / ``simpy_within``), and a line after
the table names every figure over budget.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tpucompile import driver
from tpusim.arch.cliutil import user_errors, writable_dir
from tpusim.arch.config import load_config
from tpusim.arch.errors import TpuError
from tpusim.flow.cosim import run

BUDGETS_S = {"compile": 5.0, "simpy": 30.0}


def within_budget(seconds: float | None, stage: str) -> bool | None:
    """Whether ``seconds`` of ``stage`` ("compile" or "simpy") is within BUDGETS_S; None without a
    figure."""
    return None if seconds is None else seconds <= BUDGETS_S[stage]


def budget_cell(seconds: float | None, stage: str) -> str:
    """A table cell: "3.1 within" / "6.2 over" (the budget of ``stage``), "-" without a figure."""
    ok = within_budget(seconds, stage)
    return "-" if ok is None else f"{seconds:.1f} {'within' if ok else 'over'}"


def over_budget(rows: list[dict]) -> list[str]:
    """"model stage 6.2 s > 5 s" for every figure of ``rows`` over its budget."""
    return [f"{r['model']} {stage} {r[f'{stage}_s']:.1f} s > {BUDGETS_S[stage]:g} s" for r in rows
            for stage in BUDGETS_S if within_budget(r.get(f"{stage}_s"), stage) is False]


def _row(name: str, hw: str, out: Path) -> dict:
    t = time.perf_counter()
    try:
        v = run(name, hw, out / name, rtl=False, calib=2, resume=False)
    except TpuError as e:
        return {"model": name, "error": str(e).splitlines()[0], "wall_s": time.perf_counter() - t}
    a = v.accuracy
    return {"model": name, "passed": v.passed, "load_s": v.times_s.get("load"), "compile_s": v.times_s.get("compile"),
            "simpy_s": v.times_s.get("simpy"),
            "cycles": v.cycles_simpy, "utilisation": v.utilisation, "cosine": a.get("cosine"), "sqnr_db": a.get("sqnr_db"),
            "top1": a.get("top1_agree"), "top5": a.get("top5_overlap"),
            "dataset_top1": (v.dataset or {}).get("golden_top1"), "wall_s": time.perf_counter() - t,
            **{f"{stage}_within": within_budget(v.times_s.get(stage), stage) for stage in BUDGETS_S}}


#: the zoo table's console width (the terminal's is not asked: the table goes to logs too)
ZOO_TABLE_WIDTH = 200


def zoo_table(rows: list, hw: str):
    """The rich Table of ``_row`` rows: the model column as wide as the longest name and never
    wrapped or cut, whatever the console's width (on a 120-column console it was cut to
    'bert-base-li…'); the other columns fold what does not fit over lines."""
    from rich.table import Table
    t = Table(title=f"zoo on '{hw}' (SimPy; budgets compile <= {BUDGETS_S['compile']:g} s, "
                    f"SimPy <= {BUDGETS_S['simpy']:g} s)")
    for c in ("model", "load s", "compile s", "SimPy s", "cycles", "util.", "cosine", "SQNR dB", "top-1", "top-5", "verdict"):
        if c == "model":
            t.add_column(c, no_wrap=True, min_width=max([len(r["model"]) for r in rows] + [len(c)]))
        else:
            t.add_column(c, justify="left" if c == "verdict" else "right", overflow="fold")
    f = lambda x, fmt: "-" if x is None else format(x, fmt)  # noqa: E731
    for r in rows:
        if "error" in r:
            t.add_row(r["model"], "", "", "", "", "", "", "", "", "", f"refused: {r['error']}")
            continue
        t.add_row(r["model"], f(r["load_s"], ".1f"), budget_cell(r["compile_s"], "compile"),
                  budget_cell(r["simpy_s"], "simpy"), f(r["cycles"], ","), f(r["utilisation"], ".1%"),
                  f(r["cosine"], ".4f"), f(r["sqnr_db"], ".1f"),
                  "-" if r["top1"] is None else ("agree" if r["top1"] else "differ"),
                  "-" if r["top5"] is None else f"{r['top5']}/5",
                  ("PASS" if r["passed"] else "FAIL") + ("" if r["dataset_top1"] is None
                                                        else f" (held-out top-1 {r['dataset_top1']:.1%})"))
    return t


@user_errors("bench-zoo")
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench-zoo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--hw", default="seed")
    ap.add_argument("--models", default=",".join(m for m in driver.MODELS if m != "resnet50-reduced"))
    ap.add_argument("--out", type=Path, default=Path("runs/zoo"))
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    a = ap.parse_args(argv)
    names = list(dict.fromkeys(m.strip() for m in a.models.split(",") if m.strip()))     # each once
    if not names:
        raise TpuError(f"--models: no model named in {a.models!r}; known: {', '.join(driver.MODELS)}")
    unknown = [m for m in names if m not in driver.MODELS]
    if unknown:
        raise TpuError(f"--models: unknown {unknown}; known: {', '.join(driver.MODELS)}")
    load_config(a.hw)                   # a bad --hw is refused once, before any model runs
    if a.json and not a.json.parent.is_dir():
        raise TpuError(f"--json {a.json}: no such folder {str(a.json.parent)!r}")
    a.out = writable_dir(a.out, "--out")
    rows = []
    for name in names:
        print(f"bench-zoo: {name} ...", file=sys.stderr, flush=True)
        rows.append(_row(name, a.hw, a.out))

    from rich.console import Console
    Console(width=ZOO_TABLE_WIDTH).print(zoo_table(rows, a.hw))
    over = over_budget(rows)
    print(f"over budget: {'; '.join(over)}" if over else "every figure within budget")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0 if all(r.get("passed", True) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
