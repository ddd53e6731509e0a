"""The co-simulation verdict: what `make cosim` prints and writes as JSON.

Rows (docs in README.md): outputs, cycles, accuracy, time, utilisation, traffic. A verdict passes
when no output element differs between golden, SimPy and RTL, and the SimPy and RTL cycle counts
and per-instruction retire times are identical.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from tpusim.arch.fileio import write_text_atomic


@dataclass
class Verdict:
    model: str
    config: str
    # outputs: per tensor name, mismatching elements between pairs of sides
    mismatches: dict = field(default_factory=dict)     # {tensor: {"golden_vs_simpy": n, "simpy_vs_rtl": n, "elements": n}}
    layers_compared: int = 0
    layer_mismatches: dict = field(default_factory=dict)  # {tensor: n} golden vs SimPy, every layer
    cycles_simpy: int | None = None
    cycles_rtl: int | None = None
    first_retire_diff: dict | None = None                 # {"index", "pc", "engine", "simpy_ps", "rtl_ps"}
    counter_diffs: dict = field(default_factory=dict)     # {counter: {"simpy": n, "rtl": n}} (must be empty)
    accuracy: dict = field(default_factory=dict)          # cosine, top1_agree, top5_agree, ...
    layer_accuracy: dict = field(default_factory=dict)    # layers, worst {layer, sqnr_db}, csv, png
    dataset: dict = field(default_factory=dict)           # dataset models: top-1 FP32 / golden / SimPy / RTL
    times_s: dict = field(default_factory=dict)           # load, compile, golden, simpy, rtl_build, rtl_run, fp32,
    # rtl_build_wait (the part of the background RTL build that the flow waited for)
    simpy_cycles_per_s: float | None = None
    rtl_cycles_per_s: float | None = None
    macs: int = 0
    pes: int = 0
    utilisation: float | None = None
    roofline_cycles: float | None = None
    roofline_bound: str = ""
    traffic: dict = field(default_factory=dict)           # traffic_figures(): ddr_*, fetch, compulsory_*, padded_*, floor
    counters: dict = field(default_factory=dict)
    rtl_skipped: str = ""                                 # reason, if the RTL was not run
    notes: list = field(default_factory=list)

    @property
    def outputs_ok(self) -> bool:
        n = sum(v.get("golden_vs_simpy", 0) + v.get("simpy_vs_rtl", 0) for v in self.mismatches.values())
        n += self.dataset.get("simpy_vs_golden_images", 0) + self.dataset.get("rtl_vs_golden_images", 0)
        return n == 0 and sum(self.layer_mismatches.values()) == 0

    @property
    def cycles_ok(self) -> bool:
        if self.rtl_skipped:
            return True
        return (self.cycles_simpy == self.cycles_rtl and self.first_retire_diff is None
                and not self.counter_diffs)

    @property
    def passed(self) -> bool:
        return self.outputs_ok and self.cycles_ok

    def to_json(self) -> dict:
        d = asdict(self)
        d["passed"] = self.passed
        d["outputs_ok"] = self.outputs_ok
        d["cycles_ok"] = self.cycles_ok
        return d

    def write(self, path: str | Path) -> None:
        """Write the verdict JSON atomically (temporary file, then rename)."""
        write_text_atomic(path, json.dumps(self.to_json(), indent=2, default=_jsonable))


def _jsonable(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def count_mismatch(a: np.ndarray | None, b: np.ndarray | None) -> int:
    """Number of differing elements; a shape mismatch counts every element of the larger."""
    if a is None or b is None:
        return -1
    if a.shape != b.shape:
        return max(a.size, b.size)
    return int(np.count_nonzero(a != b))


def accuracy_text(a: dict) -> str:
    """The verdict's accuracy row: cosine (or why not), SQNR, max error, top-k of classifiers."""
    parts = ["FP32 output constant: no cosine" if a.get("constant_fp32") else f"cosine {a.get('cosine', float('nan')):.4f}",
             f"SQNR {a.get('sqnr_db', float('nan')):.1f} dB", f"max |error| {a.get('max_abs', float('nan')):.4g}"
             + (f" = {a['max_lsb']:.3g} LSB of the output" if "max_lsb" in a else "")]
    if "top1_agree" in a:
        parts += [f"top-1 {'agree' if a['top1_agree'] else 'differ'}", f"top-5 overlap {a['top5_overlap']}/5"]
    return "int8 vs FP32 output: " + ", ".join(parts)


def dataset_text(d: dict) -> str:
    """The verdict's dataset row."""
    parts = [f"top-1 over {d['images']} held-out images: FP32 {d['fp32_top1']:.2%}, int8 golden {d['golden_top1']:.2%}"]
    if d.get("simpy_images"):
        parts.append(f"SimPy {d['simpy_top1']:.2%} on {d['simpy_images']} ({d['simpy_vs_golden_images']} differ "
                     "from golden)")
    if d.get("rtl_images"):
        parts.append(f"RTL {d['rtl_top1']:.2%} on {d['rtl_images']} ({d['rtl_vs_golden_images']} differ from golden)")
    return ", ".join(parts)


def layer_accuracy_text(la: dict) -> str:
    """The accuracy row's per-layer part: how many layers, the lowest SQNR and where."""
    if not la.get("layers"):
        return ""
    w, f, th = la["worst"], la.get("first_below"), la.get("thresholds", {})
    text = (f"; per layer ({la['layers']} layers, {Path(la['csv']).name}): lowest SQNR "
            f"{w['sqnr_db']:.1f} dB at {w['layer']!r} ({w['op']})")
    if f is None:
        return text + f"; every layer at cosine >= {th.get('cosine')} and SQNR >= {th.get('sqnr_db')} dB"
    cos = "" if f["cosine"] is None else f", cosine {f['cosine']:.4f}"
    return text + (f"; first below cosine {th.get('cosine')} / SQNR {th.get('sqnr_db')} dB: {f['layer']!r} "
                   f"(SQNR {f['sqnr_db']:.1f} dB{cos})")


def traffic_figures(meta: dict, counters: dict) -> dict:
    """The verdict's ``traffic``: DDR bytes the run moved (``counters``: the SimPy run's) against
    the true compulsory traffic of the program (``meta``: the binary's meta; bytes, unpadded).

    ``compulsory_read`` = the int8 weights once + each graph input once + each activation read
    once per consumer; ``compulsory_write`` = each activation written once (C·H·W int8 bytes of
    the graph as given: ``meta["stats"]["true_compulsory"]``). ``padded_read`` / ``padded_write``
    are the same counted per op of the device graph as compiled, on its layout (fused ops: a residual
    Add fused into its conv reads no intermediate; the whole constants blob, channel-padded tensors,
    a host im2col input): neither bytes moved nor a lower bound (fusion can take it below the
    compulsory figures, padding above them).
    ``floor_compute_cycles`` (MACs / PEs), ``floor_ddr_cycles`` (compulsory bytes / the DDR's
    peak bytes per core cycle), ``floor_cycles`` (their max) and ``ddr_bytes_per_cycle`` are the
    compiler's (``tpucompile.backend.compile.true_compulsory``), read from the meta, not
    recomputed. A binary whose true_compulsory lacks the floor terms (compiled before they were
    added) gets the padded figures only."""
    st = meta["stats"]
    tc = dict(st.get("true_compulsory", {}))
    tr = {"ddr_read": int(counters.get("ddr_read_bytes", 0)), "ddr_write": int(counters.get("ddr_write_bytes", 0)),
          "fetch": int(counters.get("fetch_bytes", 0)),
          "padded_read": int(st["compulsory_load_bytes"]), "padded_write": int(st["compulsory_store_bytes"]),
          "true_compulsory": tc}
    if "floor_compute_cycles" in tc:
        tr["compulsory_read"] = tc["weights"] + tc["input"] + tc["reads"]
        tr["compulsory_write"] = tc["writes"]
        for k in ("floor_compute_cycles", "floor_ddr_cycles", "floor_cycles", "ddr_bytes_per_cycle"):
            tr[k] = tc[k]
    return tr


def bytes_text(n: float) -> str:
    """A byte count for a person: exact below 100 kB, else kB / MB with two decimals."""
    if n < 100_000:
        return f"{int(n):,} B"
    return f"{n / 1e3:.2f} kB" if n < 1e6 else f"{n / 1e6:.2f} MB"


def traffic_rows(tr: dict, cycles: int) -> list[tuple[str, str]]:
    """The verdict's ``traffic`` and ``floor`` rows from traffic_figures() (none if empty)."""
    if not tr:
        return []
    if "compulsory_read" not in tr:          # a binary without true_compulsory: the padded figures only
        return [("traffic", f"DDR read {tr['ddr_read']:,} B, write {tr['ddr_write']:,} B, instruction fetch "
                            f"{tr['fetch']:,} B; per device op on the padded layout (fused ops, whole constants blob, "
                            f"channel-padded tensors): "
                            f"read {tr['padded_read']:,} B, write {tr['padded_write']:,} B")]
    tc, b = tr["true_compulsory"], bytes_text
    moved = tr["ddr_read"] + tr["ddr_write"]
    ratio = lambda a, c: f"×{a / c:.2f}" if c else "n/a"
    rows = [("traffic", f"DDR read {tr['ddr_read']:,} B ({ratio(tr['ddr_read'], tr['compulsory_read'])} of the "
                        f"compulsory {tr['compulsory_read']:,}), write {tr['ddr_write']:,} B "
                        f"({ratio(tr['ddr_write'], tr['compulsory_write'])} of the compulsory "
                        f"{tr['compulsory_write']:,}), instruction fetch {tr['fetch']:,} B; compulsory = unpadded "
                        f"int8 weights once, input once, each activation written once and read once per "
                        f"consumer; counted per device op on the padded layout (fused ops, whole constants blob, "
                        f"channel-padded tensors: not bytes moved, and below the compulsory where fusion "
                        f"drops a tensor) read "
                        f"{tr['padded_read']:,} B, write {tr['padded_write']:,} B")]
    rows.append(("floor", f"true compulsory traffic {b(tc['total'])} (weights {b(tc['weights'])}, input "
                          f"{b(tc['input'])}, activations written {b(tc['writes'])}, read {b(tc['reads'])}); DDR "
                          f"moved {b(moved)} = {ratio(moved, tc['total'])} of it; physical floor "
                          f"{tr['floor_cycles']:,} cycles = max(compute {tr['floor_compute_cycles']:,} = MACs / PEs, "
                          f"DDR {tr['floor_ddr_cycles']:,} = compulsory bytes / {tr['ddr_bytes_per_cycle']:g} B per "
                          f"core cycle), this run {ratio(cycles, tr['floor_cycles'])}"))
    return rows


def render(v: Verdict) -> None:
    """Print the verdict table with rich."""
    from rich.console import Console
    from rich.table import Table

    ok = "[green]PASS[/green]"
    bad = "[red]FAIL[/red]"
    t = Table(title=f"cosim verdict: {v.model} on '{v.config}'", show_lines=True)
    t.add_column("row", style="bold")
    t.add_column("result")
    t.add_column("", justify="center")

    gs = sum(m.get("golden_vs_simpy", 0) for m in v.mismatches.values())
    sr = sum(m.get("simpy_vs_rtl", 0) for m in v.mismatches.values())
    lm = sum(v.layer_mismatches.values())
    elems = sum(m.get("elements", 0) for m in v.mismatches.values())
    rtl_txt = f"SimPy vs RTL {sr}" if not v.rtl_skipped else f"RTL not run ({v.rtl_skipped})"
    t.add_row("outputs", f"{elems} output elements: golden vs SimPy {gs}, {rtl_txt}; "
                         f"{v.layers_compared} layer outputs golden vs SimPy: {lm} mismatching",
              ok if v.outputs_ok else bad)
    if v.rtl_skipped:
        cyc = f"SimPy {v.cycles_simpy:,} (RTL not run)"
    else:
        diff = "none" if v.first_retire_diff is None else json.dumps(v.first_retire_diff)
        cyc = f"SimPy {v.cycles_simpy:,} vs RTL {v.cycles_rtl:,}; first differing retire: {diff}"
        cyc += ("; performance counters: all equal" if not v.counter_diffs else
                f"; performance counters differ: {json.dumps(v.counter_diffs)}")
    t.add_row("cycles", cyc, ok if v.cycles_ok else bad)
    a = v.accuracy
    if a:
        t.add_row("accuracy", accuracy_text(a) + layer_accuracy_text(v.layer_accuracy), "")
    if v.dataset:
        t.add_row("dataset", dataset_text(v.dataset), ok if v.outputs_ok else bad)
    tm = v.times_s
    parts = [f"{k} {tm[k]:.1f}" for k in ("load", "compile", "golden", "fp32", "simpy", "rtl_build",
                                          "rtl_build_wait", "rtl_run") if k in tm]
    if v.simpy_cycles_per_s:
        parts.append(f"SimPy {v.simpy_cycles_per_s:,.0f} cycles/s")
    if v.rtl_cycles_per_s:
        parts.append(f"RTL {v.rtl_cycles_per_s:,.0f} cycles/s")
    t.add_row("time (s)", ", ".join(parts), "")
    if v.utilisation is not None:
        t.add_row("utilisation", f"{v.macs:,} MACs / ({v.cycles_simpy:,} cycles × {v.pes} PEs) = "
                                 f"{v.utilisation:.1%}; roofline bound {v.roofline_cycles:,.0f} cycles "
                                 f"({v.roofline_bound}-bound) = {v.roofline_cycles / max(v.cycles_simpy, 1):.1%} of actual", "")
    for row, text in traffic_rows(v.traffic, v.cycles_simpy or 0):
        t.add_row(row, text, "")
    for n in v.notes:
        t.add_row("note", n, "")
    Console().print(t)
    Console().print(f"verdict: {'[green]PASS[/green]' if v.passed else '[red]FAIL[/red]'}")
