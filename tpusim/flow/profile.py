"""Per-layer profile of a SimPy run: where the cycles of each layer went, a Chrome / Perfetto
trace and a roofline plot.

    tpusim profile OUT.tpubin --input x.npy --out DIR      (tpusim.flow.cli; also ``cosim --profile``)

Inputs: the binary (its ``meta["layers"]``: name, op, MACs, instruction range) and the run's
``SimResult.timeline`` (per instruction: engine, pc, ready / start / completion ps). Per layer
(``layer_rows``, all counts in core cycles of ``cfg``):

* ``cycles``: from the first start to the last completion of its instructions (layers overlap
  when the schedule runs one's DMAs under another's compute, so the sum can exceed the run);
* ``macs``, ``utilisation`` = MACs / (cycles x PEs); ``load_bytes`` / ``store_bytes`` of its
  DMA_LOAD / DMA_STORE (``inner_bytes * count1 * count2``), ``ddr_bytes_per_cycle`` achieved;
* ``compute_floor`` = MACs / PEs; ``vector_floor`` = the vector unit's busy cycles (its
  element-wise work at its width: requantization, Softmax, LayerNorm, LUTs); ``memory_floor`` =
  the DDR bytes it moved / peak bytes per core cycle (beat bytes x DDR MHz / core MHz);
  ``compulsory_bytes`` (the compiler's ``meta["layers"][i]["compulsory_bytes"]``: its constants,
  the part of each input it needs and its output, each once, unpadded) and ``compulsory_floor`` =
  those bytes / peak;
  ``traffic_ratio`` = bytes moved / compulsory bytes; ``floor`` = max(compute, vector and
  compulsory floors): what the hardware needs at the least (the vector term as compiled, padded
  lanes included); ``ratio`` = cycles / floor. A binary without ``compulsory_bytes`` (compiled
  before they were recorded) counts the bytes each layer moved as compulsory (``summary_lines``
  says so);
* per engine (load, store, mxu, vpu) ``<e>_busy`` (share of the layer's span with an instruction
  of it in flight: the union of its [start, completion) intervals, the MXU's overlapping ones
  counted once) and ``<e>_wait`` (share of the span spent ready but waiting for tokens with none
  in flight; a wait that began before the layer's first start counts from there), their sum at
  most 1;
* ``sram_bytes`` (the SRAM word accesses the model granted during its instructions),
  ``acc_accesses`` (int32 accumulator elements of its MATMULs and REQUANTs) and the energy of its
  events, ``energy_uj`` = ``mac_uj`` + ``sram_uj`` + ``acc_uj`` + ``ddr_uj`` (``cfg.energy``,
  tpusim.arch.costs); ``energy_totals`` adds instruction fetch, ``area_mm2`` the blocks' area;
* ``bound``: "compute", "vector" or "memory" (the largest hardware floor) when the ratio is at
  most 1.25, else "compiler" (the hardware could run the layer in well under its cycles);
  ``cause``: "at <bound> floor", else what the compiler left: "traffic: moves N.Nx its
  compulsory bytes" when the bytes it moved alone take over 1.25x the floor (re-read windows or
  weights, padding, a host im2col), and "schedule: <busiest engine> busy N %, <engine waiting
  longest for tokens> token wait N %" when its cycles exceed 1.25x max(compute, vector and
  memory floors) (the engines did not overlap: what to look at first).

The trace (``chrome_trace``) is the Trace Event Format (the JSON the Perfetto UI and
chrome://tracing open): one thread per engine ("LOAD", "STORE", "MXU", "VPU"), each instruction a
complete event ("ph": "X") named after its layer, timestamps in microseconds; instructions of one
engine that overlap in time (a DMA channel's bursts in flight, a LOAD_WEIGHTS under a MATMUL) on
further lanes of it ("LOAD #2", ...: complete events on one thread must nest, or Perfetto drops
them); and a counter track of the DDR bandwidth (GB/s) the running DMA instructions move, each
at its average rate.
"""
from __future__ import annotations

import bisect
import csv
import io
import json
from pathlib import Path

from tpusim.arch.binary import TpuBinary
from tpusim.arch.errors import TpuError
from tpusim.arch.fileio import write_text_atomic
from tpusim.arch.isa import ENGINE_KEYS, INSTR_BYTES, SRAM_REQUESTER_ENGINE, Instruction, decode_program
from tpusim.arch.timebase import Timebase

__all__ = ["layer_rows", "bound_and_cause", "summary_lines", "chrome_trace", "write_profile", "roofline_png",
           "print_table", "area_mm2", "energy_totals", "COLUMNS", "FLOOR_OF_BOUND"]

#: ratio of cycles to the layer's floor up to which the layer counts as at its floor
AT_FLOOR = 1.25
#: a hardware bound -> the row's floor that names it (memory: the compulsory bytes, not the bytes moved)
FLOOR_OF_BOUND = {"compute": "compute_floor", "vector": "vector_floor", "memory": "compulsory_floor"}
COLUMNS = ("layer", "op", "cycles", "macs", "utilisation", "load_bytes", "store_bytes", "ddr_bytes_per_cycle",
           "compute_floor", "vector_floor", "memory_floor", "compulsory_bytes", "compulsory_floor", "traffic_ratio",
           "floor", "ratio", "bound", "cause") + tuple(
    f"{e}_{k}" for e in ENGINE_KEYS for k in ("busy", "wait")) + (
    "sram_bytes", "acc_accesses", "energy_uj", "mac_uj", "sram_uj", "acc_uj", "ddr_uj")


def area_mm2(cfg) -> dict:
    """Area estimate (mm^2) by block from ``cfg.area``: the PE array, the SRAM, the accumulator (as
    SRAM of its int32 bytes), two DMA channels, and their ``total``."""
    a = cfg.area
    out = {"array": cfg.pes * a.pe_um2 * 1e-6,
           "sram": cfg.sram_size_bytes / 1024 * a.sram_um2_per_kib * 1e-6,
           "accumulator": cfg.acc_depth_rows * cfg.array_cols * 4 / 1024 * a.sram_um2_per_kib * 1e-6,
           "dma": 2 * a.dma_channel_um2 * 1e-6}
    out["total"] = sum(out.values())
    return out


def energy_totals(rows: list[dict], cfg, counters: dict) -> dict:
    """Energy per inference (uJ) by component: the layers' MAC, SRAM, accumulator and DDR energy,
    plus instruction fetch (``fetch_bytes`` from DDR and one fetch-buffer read per instruction),
    and their ``total``."""
    fetch_bytes = counters.get("fetch_bytes", 0)
    out = {k: sum(r[f"{k}_uj"] for r in rows) for k in ("mac", "sram", "acc", "ddr")}
    out["fetch"] = (fetch_bytes * cfg.energy.ddr_pj_per_byte
                    + fetch_bytes / INSTR_BYTES * cfg.energy.fetch_pj_per_instruction) * 1e-6
    out["total"] = sum(out.values())
    return out


def _dma_bytes(ins) -> int:
    return ins["inner_bytes"] * ins["count1"] * ins["count2"] if ins.op in ("DMA_LOAD", "DMA_STORE") else 0


def _layer_of(binary: TpuBinary) -> list:
    """Per instruction index, the index of the layer whose range holds it (None: the prologue,
    HALT)."""
    n = len(binary.code) // INSTR_BYTES
    owner = [None] * n
    for i, L in enumerate(binary.meta.get("layers", [])):
        for k in range(L["instr_begin"], min(L["instr_end"], n)):
            owner[k] = i
    return owner


def _merged(intervals: list) -> list:
    """The union of half-open intervals [(start, end)], as sorted disjoint intervals."""
    out: list = []
    for s, c in sorted(iv for iv in intervals if iv[1] > iv[0]):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], c)
        else:
            out.append([s, c])
    return out


def _overlap(a: list, b: list) -> int:
    """Total length of the intersection of two sorted disjoint interval lists."""
    i = j = total = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _sram_words_by_instruction(timeline: list, sram_grants) -> dict:
    """SRAM word accesses per timeline index: a grant of a requester of engine e
    (``SRAM_REQUESTER_ENGINE``) goes to the last instruction of engine e started at or before it
    whose [start, completion] holds it (the MXU's overlapping instructions: the latest)."""
    per_engine: dict = {}
    for i, (eng, _pc, _r, s_ps, c_ps) in enumerate(timeline):
        per_engine.setdefault(eng, []).append((s_ps, c_ps, i))
    for lst in per_engine.values():
        lst.sort()
    starts = {e: [s for s, _, _ in lst] for e, lst in per_engine.items()}
    words: dict = {}
    for requester, g_ps, n in sram_grants:
        req = SRAM_REQUESTER_ENGINE[requester]
        lst = per_engine.get(req)
        k = bisect.bisect_right(starts[req], g_ps) - 1 if lst else -1
        if k >= 0 and g_ps <= lst[k][1]:
            words[lst[k][2]] = words.get(lst[k][2], 0) + n
    return words


def _acc_accesses(ins, cols: int) -> int:
    """int32 accumulator elements a MATMUL writes (and reads when accumulating) or a REQUANT /
    REQUANT_ADD reads."""
    if ins.op == "MATMUL":
        return ins["count_x"] * ins["count_y"] * cols * (2 if ins["accumulate"] else 1)
    if ins.op in ("REQUANT", "REQUANT_ADD"):
        return ins["count"] * cols
    return 0


def layer_rows(binary: TpuBinary, cfg, timeline: list, sram_grants=(),
               program: list[Instruction] | None = None) -> list[dict]:
    """One dict per layer with instructions (module docstring; keys ``COLUMNS``), in layer order.
    ``sram_grants``: the run's ``SimResult.sram_grants`` (SRAM word accesses; none: SRAM energy 0).
    ``program``: ``isa.decode_program(binary.code)`` when the caller has it already.
    TpuError for a timeline whose pcs lie outside the binary's code (another binary's run)."""
    period = Timebase(cfg).core.period_ps
    layers = binary.meta.get("layers", [])
    owner = _layer_of(binary)
    program = decode_program(binary.code) if program is None else program
    sram_words = _sram_words_by_instruction(timeline, sram_grants)
    acc = [dict(t0=None, t1=None, load=0, store=0, sram=0, accs=0, busy=[0] * 4, wait=[0] * 4) for _ in layers]
    for idx, (eng, pc, r_ps, s_ps, c_ps) in enumerate(timeline):
        k = pc // INSTR_BYTES
        if not 0 <= k < len(owner):
            raise TpuError(f"timeline instruction at pc {pc:#x} is outside the binary's {len(owner)} instructions")
        li = owner[k]
        if li is None:
            continue
        a = acc[li]
        a["t0"] = s_ps if a["t0"] is None else min(a["t0"], s_ps)
        a["t1"] = c_ps if a["t1"] is None else max(a["t1"], c_ps)
        a.setdefault("runs", []).append((eng, s_ps, c_ps))
        a.setdefault("waits", []).append((eng, r_ps, s_ps))
        ins = program[k]
        a["load" if ins.op == "DMA_LOAD" else "store"] += _dma_bytes(ins)
        a["sram"] += sram_words.get(idx, 0) * cfg.word_bytes
        a["accs"] += _acc_accesses(ins, cfg.array_cols)
    peak = cfg.ddr_peak_bytes_per_cycle
    e = cfg.energy
    rows = []
    for L, a in zip(layers, acc):
        if a["t0"] is None:
            continue
        for eng in range(len(ENGINE_KEYS)):
            busy = _merged([(s, c) for e, s, c in a["runs"] if e == eng])
            waits = _merged([(max(r, a["t0"]), s) for e, r, s in a["waits"] if e == eng])   # inside the span
            a["busy"][eng] = sum(c - s for s, c in busy)
            a["wait"][eng] = sum(c - s for s, c in waits) - _overlap(waits, busy)
        span_ps = max(a["t1"] - a["t0"], 1)
        cycles = span_ps / period
        macs = int(L.get("macs", 0))
        ddr = a["load"] + a["store"]
        comp = int(L.get("compulsory_bytes", ddr))
        cf, mf, pf = macs / cfg.pes, ddr / peak, comp / peak
        vf = a["busy"][ENGINE_KEYS.index("vpu")] / period
        floor = max(cf, vf, pf, 1.0)
        row = {"layer": L["name"], "op": L["op"], "cycles": round(cycles), "macs": macs,
               "utilisation": macs / (cycles * cfg.pes), "load_bytes": a["load"], "store_bytes": a["store"],
               "ddr_bytes_per_cycle": ddr / cycles, "compute_floor": cf, "vector_floor": vf, "memory_floor": mf,
               "compulsory_bytes": comp, "compulsory_floor": pf, "traffic_ratio": ddr / max(comp, 1), "floor": floor,
               "ratio": cycles / floor}
        for i, key in enumerate(ENGINE_KEYS):
            row[f"{key}_busy"] = a["busy"][i] / span_ps
            row[f"{key}_wait"] = a["wait"][i] / span_ps
        row["bound"], row["cause"] = bound_and_cause(row)
        row.update(sram_bytes=a["sram"], acc_accesses=a["accs"], mac_uj=macs * e.mac_pj * 1e-6,
                   sram_uj=a["sram"] * cfg.sram_pj_per_byte * 1e-6, acc_uj=a["accs"] * e.acc_pj_per_access * 1e-6,
                   ddr_uj=ddr * e.ddr_pj_per_byte * 1e-6)
        row["energy_uj"] = row["mac_uj"] + row["sram_uj"] + row["acc_uj"] + row["ddr_uj"]
        rows.append(row)
    return rows


def bound_and_cause(row: dict) -> tuple:
    """(``bound``, ``cause``) of a ``layer_rows`` row from its ``cycles``, floors, ``traffic_ratio``
    and engine shares (module docstring)."""
    if row["ratio"] <= AT_FLOOR:
        bound = max(FLOOR_OF_BOUND, key=lambda b: row[FLOOR_OF_BOUND[b]])
        return bound, f"at {bound} floor"
    traffic = row["memory_floor"] > AT_FLOOR * row["floor"]
    schedule = row["cycles"] > AT_FLOOR * max(row["compute_floor"], row["vector_floor"], row["memory_floor"])
    if not traffic and not schedule:    # each within 1.25x, together past it: both
        traffic = schedule = True
    parts = [f"traffic: moves {row['traffic_ratio']:.1f}x its compulsory bytes"] if traffic else []
    if schedule:
        busy = max(ENGINE_KEYS, key=lambda e: row[f"{e}_busy"])
        wait = max(ENGINE_KEYS, key=lambda e: row[f"{e}_wait"])
        parts.append(f"schedule: {busy} busy {row[f'{busy}_busy']:.0%}, {wait} token wait {row[f'{wait}_wait']:.0%}")
    return "compiler", "; ".join(parts)


def summary_lines(rows: list[dict], binary: TpuBinary) -> list[str]:
    """What the per-layer table adds up to, and what it cannot say: the layers (and their cycles)
    per ``bound``; a note if the binary has no per-layer metadata (a stressgen program: no rows,
    no per-layer energy) or layers without the compiler's ``compulsory_bytes`` (compiled before
    they were recorded: their floors count the bytes moved, so traffic overhead cannot show)."""
    layers = [L for L in binary.meta.get("layers", []) if L["instr_end"] > L["instr_begin"]]
    if not layers:
        return ["note: the binary has no per-layer metadata (meta['layers'], e.g. a stressgen program): "
                "no layer rows, and the energy below is instruction fetch only"]
    out = []
    by: dict = {}
    for r in rows:
        n, c = by.get(r["bound"], (0, 0))
        by[r["bound"]] = (n + 1, c + r["cycles"])
    out.append(f"{len(rows)} layers: " + ", ".join(f"{n} {b}-bound ({c:,} cycles)" for b, (n, c) in sorted(
        by.items(), key=lambda kv: -kv[1][1])))
    missing = sum("compulsory_bytes" not in L for L in layers)
    if missing:
        out.append(f"note: {missing} of {len(layers)} layers have no compulsory bytes in the binary (compiled before "
                   "the compiler recorded them): their memory floor counts the bytes they moved, so traffic "
                   "overhead does not show; recompile for the full diagnosis")
    return out


def chrome_trace(binary: TpuBinary, cfg, timeline: list, program: list[Instruction] | None = None) -> dict:
    """The run as a Trace Event Format object (module docstring): ``{"traceEvents": [...],
    "displayTimeUnit": "ns"}``. ``program``: ``isa.decode_program(binary.code)`` if already decoded."""
    layers = binary.meta.get("layers", [])
    owner = _layer_of(binary)
    program = decode_program(binary.code) if program is None else program
    events = [{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": f"tpusim {cfg.name}"}}]
    steps = []
    lanes = _lanes(timeline)
    for (eng, pc, r_ps, s_ps, c_ps), lane in zip(timeline, lanes):
        k = pc // INSTR_BYTES
        if not 0 <= k < len(program):
            raise TpuError(f"timeline instruction at pc {pc:#x} is outside the binary's {len(program)} instructions")
        ins = program[k]
        li = owner[k]
        name = layers[li]["name"] if li is not None else ins.op
        events.append({"name": name, "cat": ins.op, "ph": "X", "pid": 1, "tid": _tid(eng, lane), "ts": s_ps / 1e6,
                       "dur": max(c_ps - s_ps, 1) / 1e6,
                       "args": {"pc": pc, "op": ins.op, "token_wait_ns": (s_ps - r_ps) / 1e3}})
        nbytes = _dma_bytes(ins)
        if nbytes and c_ps > s_ps:
            rate = nbytes / (c_ps - s_ps) * 1e3          # bytes per ps -> GB/s
            steps += [(s_ps, rate), (c_ps, -rate)]
    steps.sort()
    level = 0.0
    times = []
    for t, d in steps:
        level += d
        if times and times[-1][0] == t:
            times[-1] = (t, level)
        else:
            times.append((t, level))
    events += [{"name": "DDR bandwidth (GB/s)", "ph": "C", "pid": 1, "ts": t / 1e6,
                "args": {"GB/s": round(max(v, 0.0), 3)}} for t, v in times]
    used = sorted(set(zip((t[0] for t in timeline), lanes)) | {(e, 0) for e in range(len(ENGINE_KEYS))})
    for eng, lane in used:
        tid, label = _tid(eng, lane), ENGINE_KEYS[eng].upper() + (f" #{lane + 1}" if lane else "")
        events += [{"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": label}},
                   {"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": tid, "args": {"sort_index": tid}}]
    return {"traceEvents": events, "displayTimeUnit": "ns"}


#: trace thread ids per engine: engine e's lanes are tids e * LANE_TIDS + lane
LANE_TIDS = 100


def _tid(eng: int, lane: int) -> int:
    return eng * LANE_TIDS + lane


def _lanes(timeline: list) -> list:
    """Per timeline entry the lane of its engine's track it is drawn on: instructions of one
    engine that overlap in time (a DMA channel's bursts in flight, the MXU's LOAD_WEIGHTS under a
    MATMUL) go to the first lane free at their start, so complete events on one trace thread
    never partly overlap (the Trace Event Format's nesting rule, which Perfetto enforces)."""
    order = sorted(range(len(timeline)), key=lambda i: (timeline[i][0], timeline[i][3], i))
    lanes = [0] * len(timeline)
    free: dict = {}                        # engine -> per lane the end (ps) of its last slice
    for i in order:
        eng, s_ps, c_ps = timeline[i][0], timeline[i][3], max(timeline[i][4], timeline[i][3] + 1)
        ends = free.setdefault(eng, [])
        lane = next((k for k, end in enumerate(ends) if end <= s_ps), len(ends))
        if lane == len(ends):
            ends.append(c_ps)
        else:
            ends[lane] = c_ps
        lanes[i] = lane
    return lanes


def roofline_png(rows: list[dict], cfg, path: Path) -> tuple:
    """Each layer's operational intensity (MACs per DDR byte) against its achieved MACs per cycle,
    under the compute roof (PEs) and the memory roof (peak bytes per cycle x intensity); log-log.
    Returns the (x, y) axis labels."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    peak = cfg.ddr_peak_bytes_per_cycle
    pts = [(r["macs"] / max(r["load_bytes"] + r["store_bytes"], 1), r["macs"] / max(r["cycles"], 1), r)
           for r in rows if r["macs"]]
    fig, ax = plt.subplots(figsize=(7.0, 4.5), dpi=100)
    lo = min([p[0] for p in pts] + [0.1]) / 2
    hi = max([p[0] for p in pts] + [cfg.pes / peak * 4]) * 2
    xs = [lo * (hi / lo) ** (i / 99) for i in range(100)]
    ax.plot(xs, [min(cfg.pes, x * peak) for x in xs], color="black", linewidth=1.5, label="roof")
    for bound, color in (("compute", "tab:blue"), ("vector", "tab:green"), ("memory", "tab:orange"),
                         ("compiler", "tab:red")):
        sel = [(x, y) for x, y, r in pts if r["bound"] == bound]
        if sel:
            ax.scatter([x for x, _ in sel], [y for _, y in sel], s=14, color=color, label=f"{bound}-bound layer")
    worst = sorted(pts, key=lambda p: -p[2]["cycles"])[:5]
    for x, y, r in worst:
        ax.annotate(r["layer"], (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("operational intensity (MACs per DDR byte)")
    ax.set_ylabel("achieved MACs per cycle")
    ax.set_title(f"roofline on '{cfg.name}': {cfg.pes} PEs, {peak:.1f} B/cycle")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    labels = (ax.get_xlabel(), ax.get_ylabel())
    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(path)
    return labels


def write_profile(binary: TpuBinary, cfg, timeline: list, out: Path, sram_grants=()) -> list[dict]:
    """``profile.csv`` (COLUMNS), ``trace.json`` (Trace Event Format) and ``roofline.png`` in
    ``out``; returns the rows."""
    out.mkdir(parents=True, exist_ok=True)
    program = decode_program(binary.code)
    rows = layer_rows(binary, cfg, timeline, sram_grants, program)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(COLUMNS), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in r.items()})
    write_text_atomic(out / "profile.csv", buf.getvalue())
    write_text_atomic(out / "trace.json", json.dumps(chrome_trace(binary, cfg, timeline, program)))
    roofline_png(rows, cfg, out / "roofline.png")
    return rows


def layer_table(rows: list[dict], title: str):
    """The per-layer rich Table of ``layer_rows``: a layer name that does not fit its column is
    folded over lines, never cut (was cut to '/encoder.layer.0.att…' for every attention layer of
    bert-tiny, so they could not be told apart)."""
    from rich.table import Table
    t = Table(title=title)
    for c in ("layer", "op", "cycles", "util.", "DDR B/cyc", "floor", "ratio", "bound", "load", "mxu", "vpu",
              "uJ", "cause"):
        t.add_column(c, justify="left" if c in ("layer", "op", "cause") else "right",
                     overflow="fold" if c in ("layer", "op", "cause") else "ellipsis")
    for r in rows:
        t.add_row(r["layer"], r["op"], f"{r['cycles']:,}", f"{r['utilisation']:.1%}",
                  f"{r['ddr_bytes_per_cycle']:.1f}", f"{r['floor']:,.0f}", f"{r['ratio']:.2f}", r["bound"],
                  f"{r['load_busy']:.0%}", f"{r['mxu_busy']:.0%}", f"{r['vpu_busy']:.0%}", f"{r['energy_uj']:.1f}",
                  r["cause"])
    return t


def print_table(rows: list[dict], title: str) -> None:
    """The per-layer table (``layer_table``) on the terminal, at least 150 columns wide."""
    from rich.console import Console
    con = Console()
    (con if con.width >= 150 else Console(width=150)).print(layer_table(rows, title))


#: op kinds whose share of the cycles ``op_shares`` reports (the transformer's vector-unit work and
#: its matmuls): QGraph op class -> label
SHARE_OPS = {"QSoftmax": "Softmax", "QLayerNorm": "LayerNorm", "QLut": "LUT (GELU, Tanh)", "QConv": "MatMul/Conv (weights)",
             "QConvAdd": "MatMul/Conv (weights)", "QConvPool": "MatMul/Conv (weights)",
             "QActMatMul": "MatMul of activations"}
#: the layers on the array: a conv or matmul with constant weights (with a fused residual Add or
#: pool too) or a matmul of activations
MATMUL_OPS = ("QConv", "QConvAdd", "QConvPool", "QActMatMul")


def op_shares(rows: list[dict]) -> list[tuple]:
    """[(label, layers, cycles, share of the summed layer spans)] for each kind of ``SHARE_OPS``
    present in the per-layer ``rows`` (``layer_rows``), in ``SHARE_OPS`` order. Layer spans can
    overlap (the engines pipeline across layers), so the shares are of their sum."""
    total = sum(r["cycles"] for r in rows) or 1
    out = []
    for label in dict.fromkeys(SHARE_OPS.values()):
        mine = [r["cycles"] for r in rows if SHARE_OPS.get(r["op"]) == label]
        if mine:
            out.append((label, len(mine), sum(mine), sum(mine) / total))
    return out


def print_matmuls_and_shares(rows: list[dict]) -> list[tuple]:
    """The utilisation of every matmul layer (``MATMUL_OPS``) and the cycle shares of
    ``op_shares``, on the terminal; returns those shares."""
    for r in rows:
        if r["op"] in MATMUL_OPS:
            print(f"  matmul {r['layer']} ({r['op']}): {r['macs']:,} MACs in {r['cycles']:,} cycles, "
                  f"utilisation {r['utilisation']:.1%}")
    shares = op_shares(rows)
    for label, n, cycles, share in shares:
        print(f"  {label}: {n} layers, {cycles:,} cycles = {share:.1%} of the summed layer spans")
    return shares
