"""Functional coverage bins of stress programs.

``bins_of(prog, cfg)`` derives every STATIC bin from the program itself (instructions, DDR
contents, and a golden run that observes the data: effective K/N of each accumulation group,
requant scales, rounding ties), so a bin counts only what the program really does - also after
the minimiser edits it. ``observed_bins(counters)`` gives the DYNAMIC bins from the SimPy / RTL
performance counters (tpusim.arch.perf.COUNTERS): those mean the event really happened.
``INVALID_BINS`` are static bins that only an invalid program hits (stressgen.invalid), required
of a campaign that makes them. ``ALL_BINS`` = STATIC_BINS + DYNAMIC_BINS + INVALID_BINS;
``required_bins(invalid_rate)``.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from stressgen.analysis import dma_runs, engine_of, footprint, match_tokens, matmul_words, ordered, vector_clocks
from stressgen.golden import run_golden
from stressgen.program import RawWord, StressError, config
from stressgen.tasks import PRIME_K
from stressgen.validate import normalise, validate
from tpusim.arch import arith
from tpusim.arch.device_checks import ddr_align_bytes, start_fault
from tpusim.arch.errors import IsaError
from tpusim.arch.isa import ENGINE_KEYS, INSTR_BYTES, Engine, unused_bits
from tpusim.arch.limits import DDR_ADDR_LIMIT, MXU_MAX_INFLIGHT
from tpusim.arch.operands import dma_ddr_end
from tpusim.arch.rowops import ROWOPS, rowop_accesses, rowop_ranges
from tpusim.arch.timebase import Timebase

STATIC_BINS = (
    # matrix problems
    "k_prime_large", "k_one", "k_odd", "k_multi_tile", "n_partial", "n_multi_tile",
    "m_one", "m_prime", "m_odd", "m_2d", "mm_stride0", "mm_strided",
    # requant scales (per channel of an executed REQUANT table)
    "scale_zero", "scale_pow2", "scale_ge1", "scale_min_shift",
    # a shift outside the compiler's [-31, 30] applied (REQUANT channel, POOL average, ADD)
    "shift_extreme",
    # rounding ties that reach an unclamped output
    "tie_requant_pos", "tie_requant_neg", "tie_pool", "tie_add", "tie_mul",
    # DDR addressing
    "ddr_ge_2_36", "dma_store_ge_2_36", "ddr_top_64k", "ddr_end_2_40", "dma_cross_4k",
    "dma_cross_4g", "dma_strided",
    # SRAM banks (bank_edge: an access with exactly one word on one side of a bank boundary)
    "bank_edge", "sram_all_banks", "sram_full", "bank_share_mxu_vpu", "bank_share_dma_mxu", "bank_share_dma_vpu",
    # quant registers
    "qreg_alias", "qreg_reload", "qreg_all_banks",
    # concurrency and dependencies
    "dma_both_directions", "dma_compute_overlap", "ddr_raw_chain", "long_chain",
    # operations
    "pool_max", "pool_avg", "add", "relu",
    # REQUANT_ADD (count > 0): any, in place (skip_addr = dst_addr), the sum clamped (add_relu)
    "requant_add", "requant_add_in_place", "requant_add_relu",
    # LUT: any, in place (dst = src), count 0 (table read only), two in a row through one output
    # lut_index_wrap: one LUT reads inputs -128, -1, 0 and 127 (docstring of _Observer._lut)
    "lut", "lut_in_place", "lut_count0", "lut_chain", "lut_index_wrap",
    # the compiler's nearest upsampling: a POOL reading one word for several outputs
    # (out_stride_x = 0) and a DMA_STORE writing one SRAM run to several DDR runs (sram_stride1 = 0)
    "pool_stride0", "dma_sram_repeat",
    # MUL: any, b broadcast (stride_b = 0), a product of magnitude 255 * 255 (the int8 extremes),
    # count 0 (no SRAM request: completes at s + 1)
    "mul", "mul_broadcast", "mul_max_product", "mul_count0",
    # DWCONV: any with outputs, a 0-tap window (the bias alone), strided outputs, a rounding tie
    # that reaches an unclamped output
    "dwconv", "dwconv_no_taps", "dwconv_strided", "tie_dwconv",
    # SOFTMAX / LAYERNORM (with rows): any, masking on, several rows, a row ending mid-word, in place
    # (dst = src), source and destination overlapping otherwise (rows re-read their own writes)
    "softmax", "softmax_mask", "layernorm", "rowop_multirow", "rowop_partial_word", "rowop_in_place",
    "rowop_overlap",
    # row edge bins (data, from the golden run): a row of >= 2 equal live logits, a row whose max
    # holds > 99.6 % of the mass (a single huge logit), a row with masked and live lanes, a fully
    # masked row (no live lane: p = 0), a LAYERNORM row of zero variance, a saturated sat32 accumulator
    "softmax_all_equal", "softmax_huge_logit", "softmax_masked_row", "softmax_fully_masked",
    "layernorm_zero_var", "layernorm_saturation",
    # a NOP in each engine's queue (an MXU / VPU NOP completes at its start edge)
    "nop_load", "nop_store", "nop_mxu", "nop_vpu",
)
#: obs_queue_full_<engine>: the decoder held an instruction because that engine's queue (a CDC
#: queue for LOAD/STORE) was full (``<engine>_queue_full_cycles`` > 0)
#: MXU drain overlap (docs/architecture.md, "MXU"), from the retire trace (``drain_bins``):
#: mm_drain_lw: a LOAD_WEIGHTS started before the preceding MATMUL completed (during its drain);
#: mm_drain_acc: a MATMUL with accumulate started during the preceding MATMUL's drain, into
#: accumulator rows that one writes
#: Double-buffered weights (docs/architecture.md, "MXU"), from the same trace: mm_plane_switch: a
#: MATMUL on the other weight plane (a LOAD_WEIGHTS between them) started before the preceding
#: MATMUL completed; mm_lw_plane_busy: a LOAD_WEIGHTS started before the MATMUL that last used the
#: plane it writes (two planes back) completed (its start waited for that MATMUL's last vector);
#: mm_lw_shared_bank: a LOAD_WEIGHTS overlapping the preceding MATMUL whose tile shares an SRAM
#: bank with that MATMUL's vectors (the weight and activation requesters conflict);
#: mm_inflight_max: MXU_MAX_INFLIGHT (tpusim.arch.limits) MXU instructions in flight at once (the
#: most the MXU allows)
DRAIN_BINS = ("mm_drain_lw", "mm_drain_acc", "mm_plane_switch", "mm_lw_plane_busy", "mm_lw_shared_bank",
              "mm_inflight_max")
#: DMA LOAD SRAM write queue (docs/architecture.md, "DMA"), from SimPy's SRAM grant log
#: (``dma_bins``): dma_load_sram_back_to_back: a LOAD burst's SRAM write granted at w + D + 1 of
#: the channel's previous one (queued in the core-domain shim behind it: the earliest its port
#: allows; never reached when each write waited for the previous one's completion to cross back)
#: DMA instructions in flight (DMA_MAX_INFLIGHT per channel, tpusim.arch.limits), from SimPy's
#: timeline: dma_load_overlap / dma_store_overlap: a DMA_LOAD / DMA_STORE started before the
#: channel's previous instruction completed (its bursts share the burst-buffer ring);
#: dma_overlap_done_clip: an overlapped DMA instruction completed at c_prev + 1 (its last burst
#: was done no later than the previous instruction's completion: completions stay in order)
DMA_BINS = ("dma_load_sram_back_to_back", "dma_load_overlap", "dma_store_overlap", "dma_overlap_done_clip")
DYNAMIC_BINS = ("obs_sram_conflict", "obs_ddr_arb_wait", "obs_token_wait") + tuple(
    f"obs_queue_full_{e}" for e in ENGINE_KEYS) + DRAIN_BINS + DMA_BINS
#: Error paths, of invalid programs only (so not in ALL_BINS: a campaign without invalid programs
#: passes; a report lists them among the bins hit outside ALL_BINS): ``err_<kind>`` per device
#: error a program is refused with (``validate``'s StressError kind: one per checker path of
#: tpu_dma_check / tpu_mxu_check / tpu_vpu_check, the decoder's reserved opcode, a deadlock),
#: ``err_edge`` when the faulting access is exactly one unit past its limit (the last SRAM word or
#: byte + 1, accumulator row ACC_DEPTH, the first 32-byte step past 2^40), and ``valid_edge_sram``
#: / ``valid_edge_acc`` for a valid instruction ending exactly on the last SRAM word / byte or
#: accumulator row (both sides of every range check's boundary); ``err_double`` for range
#: faults on two engines in one program (the decoder's choice between engine errors).
ERROR_KINDS = ("reserved_opcode", "unused_bits", "dma_misaligned", "dma_zero_length", "dma_sram_range", "dma_ddr_range",
               "mxu_sram_range", "mxu_acc_range", "vpu_sram_range", "vpu_acc_range", "qreg_unloaded",
               "deadlock")
ERROR_BINS = tuple(f"err_{k}" for k in ERROR_KINDS) + ("err_edge", "err_double")
EDGE_BINS = ("valid_edge_sram", "valid_edge_acc")
#: invalid_unused_bits: a word of a known opcode with a bit set above its last field (the decoder's
#: unused_bits device error)
INVALID_BINS = ("invalid_unused_bits",)
ALL_BINS = STATIC_BINS + DYNAMIC_BINS + INVALID_BINS
#: Non-square arrays (static; required only of a campaign on such a config, so not in ALL_BINS):
#: wide (C > R) ``rq_planes``: a REQUANT (count > 0) writing its C/R planes, ``rq_planes_banks``:
#: whose planes lie in more than one bank, ``rq_planes_gap``: with words between the planes
#: (dst_plane_stride > count); tall (R > C) ``rq_lane_group``: a REQUANT into a lane group > 0,
#: ``rq_lane_groups_full``: the REQUANTs of one program write every lane group of the same words.
WIDE_BINS = ("rq_planes", "rq_planes_banks", "rq_planes_gap")
TALL_BINS = ("rq_lane_group", "rq_lane_groups_full")


def shape_bins(cfg) -> tuple[str, ...]:
    """The non-square bins a campaign on ``cfg`` must hit (none on a square array)."""
    return (WIDE_BINS if cfg.requant_planes > 1 else ()) + (TALL_BINS if cfg.lane_groups > 1 else ())


def required_bins(invalid_rate: float, cfg=None) -> tuple[str, ...]:
    """The bins a campaign must hit: INVALID_BINS only if it makes invalid programs, the
    ``shape_bins`` of its config ``cfg`` (None: a square one)."""
    base = ALL_BINS if invalid_rate > 0 else STATIC_BINS + DYNAMIC_BINS
    return base + (shape_bins(cfg) if cfg is not None else ())
LONG_CHAIN_HOPS = 6
SHIFT_COMPILER = (-31, 30)        # tpusim.arch.arith.quantize_multiplier's shifts


def observed_bins(counters: dict) -> dict[str, int]:
    """Dynamic bins from performance counters (name -> value, tpusim.arch.perf.COUNTERS)."""
    out = {}
    if counters.get("sram_conflicts", 0) > 0:
        out["obs_sram_conflict"] = int(counters["sram_conflicts"])
    if counters.get("ddr_arb_wait_cycles", 0) > 0:
        out["obs_ddr_arb_wait"] = int(counters["ddr_arb_wait_cycles"])
    waits = sum(int(counters.get(f"{e}_token_wait_cycles", 0)) for e in ENGINE_KEYS)
    if waits > 0:
        out["obs_token_wait"] = waits
    for e in ENGINE_KEYS:
        if counters.get(f"{e}_queue_full_cycles", 0) > 0:
            out[f"obs_queue_full_{e}"] = int(counters[f"{e}_queue_full_cycles"])
    return out


def dma_bins(cfg, sram_grants, timeline=()) -> dict[str, int]:
    """DMA_BINS hit by a SimPy run on ``cfg`` (HwConfig) with SRAM grant log ``sram_grants``
    [(requester, grant ps, accesses)] (tpusim.sim.SimResult.sram_grants) and ``timeline``
    [(engine, pc, ready, start, completion) ps] (tpusim.sim.SimResult.timeline). Returns bin ->
    hits (only bins hit)."""
    tb = Timebase(cfg)
    period = tb.core.period_ps
    out: Counter = Counter()
    port_ps = None                                # port_ps: previous LOAD write's w + D + 1
    for requester, g_ps, accesses in sram_grants:
        if requester != 0:                        # SRAM requester 0: DMA LOAD
            continue
        out["dma_load_sram_back_to_back"] += g_ps == port_ps
        port_ps = g_ps + (accesses + 1) * period
    dma_period = tb.dma.period_ps
    for eng, name in ((Engine.LOAD, "dma_load_overlap"), (Engine.STORE, "dma_store_overlap")):
        prev_c = None
        for s_ps, c_ps in sorted((s, c) for e, _pc, _r, s, c in timeline if e == eng):
            if prev_c is not None and s_ps < prev_c:
                out[name] += 1
                out["dma_overlap_done_clip"] += c_ps == prev_c + dma_period
            prev_c = c_ps
    return {k: int(v) for k, v in out.items() if v}


def _mm_banks(a: dict, bank_words: int) -> set:
    """SRAM banks of a MATMUL's bank mask (M > 0)."""
    last = a["act_addr"] + (a["count_x"] - 1) * a["stride_x"] + (a["count_y"] - 1) * a["stride_y"]
    return set(range(a["act_addr"] // bank_words, last // bank_words + 1))


def drain_bins(prog, cfg, retire, timeline=None) -> dict[str, int]:
    """DRAIN_BINS hit by a run of ``prog`` on ``cfg`` (HwConfig), from its retire trace
    ``retire`` [(pc, engine name, time_ps)] (tpusim.arch.retire; SimPy's equals the RTL's). An MXU
    instruction started at s <= (its completion) - (its least duration): LOAD_WEIGHTS C + 1,
    MATMUL M + R + C + 1 cycles, or at its start in SimPy's ``timeline`` [(engine, pc, ready,
    start, completion) ps] when given; it overlapped an earlier instruction if that is before
    the earlier one's completion. Returns bin -> hits (only bins hit)."""
    starts = {pc: s for eng, pc, _r, s, _c in timeline or () if eng == Engine.MXU}
    period = Timebase(cfg).core.period_ps
    instrs = normalise(prog.instrs)
    R, C = cfg.array_rows, cfg.array_cols
    out: Counter = Counter()
    prev = None                                   # (MATMUL args, completion ps) or None
    mms = []                                      # (MATMUL args, completion ps, LOAD_WEIGHTS before it)
    lw_since = False                              # a LOAD_WEIGHTS since the last MATMUL
    done = []                                     # completion ps of the MXU instructions so far
    older = MXU_MAX_INFLIGHT - 1                  # in flight with one started: the limit reached
    for pc, eng, t in sorted((r for r in retire if r[1] == "MXU"), key=lambda r: r[2]):
        ins = instrs[pc // INSTR_BYTES]
        op = getattr(ins, "op", None)
        a = getattr(ins, "args", {})
        latest = starts.get(pc, t - ((C + 1) if op == "LOAD_WEIGHTS" else
                                     (a.get("count_x", 0) * a.get("count_y", 0) + R + C + 1)) * period)
        if op in ("LOAD_WEIGHTS", "MATMUL") and len(done) >= older and latest < done[-older]:
            out["mm_inflight_max"] += 1
        if prev is not None and op == "LOAD_WEIGHTS":
            out["mm_drain_lw"] += latest < prev[1]
            pm = prev[0]["count_x"] * prev[0]["count_y"]
            out["mm_lw_shared_bank"] += (latest < prev[1] and pm > 0 and bool(
                _mm_banks(prev[0], cfg.bank_words)
                & set(range(a["sram_addr"] // cfg.bank_words, (a["sram_addr"] + C - 1) // cfg.bank_words + 1))))
        elif prev is not None and op == "MATMUL" and a["accumulate"]:
            m = a["count_x"] * a["count_y"]
            pm = prev[0]["count_x"] * prev[0]["count_y"]
            lo, plo = a["acc_addr"], prev[0]["acc_addr"]
            out["mm_drain_acc"] += (latest < prev[1] and m > 0 and lo < plo + pm and plo < lo + m)
        if op == "LOAD_WEIGHTS":
            # the plane it writes was last used by the MATMUL before the last plane change
            last_switch = max((j for j, mm in enumerate(mms) if mm[2]), default=0)
            if last_switch > 0:
                out["mm_lw_plane_busy"] += latest < mms[last_switch - 1][1]
            lw_since = True
        elif op == "MATMUL":
            if lw_since and mms and latest < mms[-1][1]:
                out["mm_plane_switch"] += 1
            mms.append((a, t, lw_since))
            lw_since = False
        if op in ("LOAD_WEIGHTS", "MATMUL"):
            done.append(t)
        prev = (a, t) if op == "MATMUL" else None
    return {k: int(v) for k, v in out.items() if v}


def tie_mask(x, mult, shift, zp: int, lo: int) -> tuple[np.ndarray, np.ndarray]:
    """Elements of tpusim.arch.arith.requant(x, mult, shift) + zp whose rounding (SRDHM or
    RoundingDivideByPOT) hits an exact .5 and whose result is not clamped to [lo, 127].
    Returns (tie, negative) boolean arrays."""
    x = np.asarray(x, np.int64)
    mult = np.broadcast_to(np.asarray(mult, np.int64), x.shape)
    shift = np.broadcast_to(np.asarray(shift, np.int64), x.shape)
    left, right = arith.shift_amounts(shift)        # capped: exact, no int64 overflow
    t = arith.sat32(x * (np.int64(1) << left))
    p = t * mult
    tie = (p % (1 << 31)) == (1 << 30)
    u = arith.srdhm(t, mult)
    half = np.where(right > 0, np.int64(1) << np.maximum(right - 1, 0), -1)
    tie |= (right > 0) & ((u & ((np.int64(1) << right) - 1)) == half)
    y = arith.requant(x, mult, shift) + zp
    tie &= (y >= lo) & (y <= 127)
    return tie, p < 0


class _Observer:
    """Collects data-dependent bins from a golden run."""

    def __init__(self, cfg):
        self.cfg, self.bins = cfg, Counter()
        self.groups = {}               # acc_addr -> [tiles, last k_eff, n_eff, act words, M]
        self.wk = self.wn = 0
        self.w_id = None
        self.qval, self.epoch = {}, {}

    def __call__(self, ev, i, **k):
        getattr(self, "_" + ev)(i, **k)

    def _lut(self, i, x, table):
        """lut_index_wrap: one LUT looks up inputs -1 and 0, entries 255 and 0 of its table (where
        the signed input byte wraps as an unsigned index) and both extremes -128 and 127."""
        vals = set(np.unique(x).tolist())
        self.bins["lut_index_wrap"] += {-128, -1, 0, 127} <= vals

    def _weights(self, i, wts):
        nz = np.nonzero(wts)
        self.wk = int(nz[0].max()) + 1 if nz[0].size else 0
        self.wn = int(nz[1].max()) + 1 if nz[1].size else 0
        self.w_id = wts.tobytes()

    def _matmul(self, i, args):
        m = args["count_x"] * args["count_y"]
        key = (args["acc_addr"], m)
        g = self.groups.get(key)
        if not args["accumulate"] or g is None:
            g = self.groups[key] = {"tiles": 0, "n": 0, "acts": []}
        g["tiles"] += 1
        g["k"] = self.wk
        g["n"] = max(g["n"], self.wn)
        g["acts"].append((tuple(matmul_words(args)), self.w_id))
        self._close(g)

    def _close(self, g):
        R, C = self.cfg.array_rows, self.cfg.array_cols
        if not g["k"]:
            return
        k = (g["tiles"] - 1) * R + g["k"]
        b = self.bins
        for name, hit in (("k_prime_large", k in PRIME_K), ("k_one", k == 1), ("k_odd", k % 2 and k > 1),
                          ("k_multi_tile", g["tiles"] > 1), ("n_partial", g["n"] % C != 0)):
            if hit:
                b[name] = max(b[name], 1)
        sig = tuple(a for a, _ in g["acts"])
        for other in self.groups.values():
            if other is not g and tuple(a for a, _ in other["acts"]) == sig and other["acts"] != g["acts"]:
                b["n_multi_tile"] = max(b["n_multi_tile"], 1)

    def _ties(self, names, x, mult, shift, zp, relu):
        tie, neg = tie_mask(x, mult, shift, zp, zp if relu else -128)
        if tie.any():
            if len(names) == 1:
                self.bins[names[0]] += int(tie.sum())
            else:
                self.bins[names[0]] += int((tie & ~neg).sum())
                self.bins[names[1]] += int((tie & neg).sum())

    def _requant(self, i, x, mult, shift, zp, relu):
        b = self.bins
        b["scale_zero"] += int((mult == 0).sum())
        b["scale_pow2"] += int((mult == 1 << 30).sum())
        b["scale_ge1"] += int(((mult != 0) & (shift >= 1)).sum())
        b["scale_min_shift"] += int(((mult != 0) & (shift <= -30)).sum())
        b["shift_extreme"] += int(((shift < SHIFT_COMPILER[0]) | (shift > SHIFT_COMPILER[1])).sum())
        self._ties(("tie_requant_pos", "tie_requant_neg"), x, mult, shift, zp, relu)

    def _pool_avg(self, i, x, mult, shift, zp):
        self._ties(("tie_pool",), x, mult, shift, zp, 0)

    def _add(self, i, x, mult, shift, zp, relu):
        self._ties(("tie_add",), x, mult, shift, zp, relu)

    def _dwconv(self, i, x, mult, shift, zp, relu):
        self._ties(("tie_dwconv",), x, mult, shift, zp, relu)

    def _mul(self, i, x, mult, shift, zp, relu):
        self._ties(("tie_mul",), x, mult, shift, zp, relu)
        self.bins["mul_max_product"] += int((np.abs(x) == 255 * 255).sum())

    def _softmax(self, i, x, in_row, live, total):
        b = self.bins
        for xr, lr, t in zip(x, live, total):
            vals = xr[lr]
            b["softmax_all_equal"] += vals.size >= 2 and vals.min() == vals.max()
            b["softmax_huge_logit"] += vals.size >= 2 and int(t) * 256 < 257 << arith.SOFTMAX_E_BITS
            b["softmax_masked_row"] += 0 < vals.size < int(in_row.sum())
            b["softmax_fully_masked"] += int(in_row.sum()) > 0 and vals.size == 0

    def _layernorm(self, i, x, valid, var, acc):
        self.bins["layernorm_zero_var"] += int((var == 0).sum())
        self.bins["layernorm_saturation"] += int(((acc == arith.INT32_MAX) | (acc == arith.INT32_MIN)).sum())

    def _qreg_load(self, i, qreg, value):
        prev = self.qval.get(qreg)
        if prev is not None and prev != value and qreg in self.epoch.get("read", set()):
            self.bins["qreg_reload"] += 1
        self.qval[qreg] = value
        self.epoch.setdefault("read", set()).discard(qreg)
        for base in range(16):
            grp = [base + 16 * j for j in range(4)]
            if qreg in grp:
                self.epoch[base] = set()       # a new epoch for this alias group

    def _qreg_read(self, i, qreg, value, field):
        lo, hi = SHIFT_COMPILER
        if field in ("qreg_a", "qreg_b", "qreg_out") and not lo <= value[1] <= hi:
            self.bins["shift_extreme"] += 1             # POOL average / ADD apply this shift
        self.epoch.setdefault("read", set()).add(qreg)
        base = qreg % 16
        grp = [base + 16 * j for j in range(4)]
        vals = [self.qval.get(q) for q in grp]
        if None not in vals and len(set(vals)) == 4:
            seen = self.epoch.setdefault(base, set())
            seen.add(qreg)
            if len(seen) == 4:
                self.bins["qreg_alias"] += 1
                self.epoch[base] = set()


def _static(prog, cfg, instrs, b: Counter) -> None:
    W, bank_bytes = cfg.word_bytes, cfg.bank_bytes
    feet = [footprint(ins, cfg) for ins in instrs]
    banks, loaded, qbanks, lut_outs = set(), set(), set(), set()
    groups = {}                                        # tall: (dst_addr, count) -> lane groups
    for i, ins in enumerate(instrs):
        a = getattr(ins, "args", {})
        for sp, lo, hi, wr in feet[i]:
            if sp == "sram":
                banks.update(range(lo // bank_bytes, (hi - 1) // bank_bytes + 1))
                first_end = (lo // bank_bytes + 1) * bank_bytes       # end of the first word's bank
                b["bank_edge"] += hi > first_end and (lo + W == first_end or hi - W == (hi - 1) // bank_bytes * bank_bytes)
        if ins.op in ("DMA_LOAD", "DMA_STORE"):
            runs = dma_runs(a)
            for d, s, n in runs:
                b["ddr_ge_2_36"] += d + n > 1 << 36
                b["dma_store_ge_2_36"] += ins.op == "DMA_STORE" and d + n > 1 << 36
                b["ddr_top_64k"] += d + n > DDR_ADDR_LIMIT - (1 << 16)
                b["ddr_end_2_40"] += d + n == DDR_ADDR_LIMIT
                b["dma_cross_4k"] += d // 4096 != (d + n - 1) // 4096
                b["dma_cross_4g"] += d < 1 << 32 < d + n
            b["dma_sram_repeat"] += a["count1"] > 1 and a["sram_stride1"] == 0
            b["dma_strided"] += len(runs) > 1 and a["ddr_stride1" if a["count1"] > 1 else "ddr_stride2"] > a["inner_bytes"]
            if ins.op == "DMA_LOAD":
                for _, s, n in runs:
                    loaded.update(range(s // W, (s + n) // W))
        elif ins.op == "MATMUL":
            m = a["count_x"] * a["count_y"]
            b["m_one"] += m == 1
            b["m_odd"] += m > 1 and m % 2 == 1
            b["m_prime"] += m > 2 and all(m % d for d in range(2, int(m ** 0.5) + 1))
            b["m_2d"] += a["count_x"] > 1 and a["count_y"] > 1
            b["mm_stride0"] += a["count_x"] > 1 and a["stride_x"] == 0
            b["mm_strided"] += a["count_x"] > 1 and a["stride_x"] > 1
        elif ins.op == "POOL":
            b["pool_avg" if a["mode"] else "pool_max"] += 1
            b["pool_stride0"] += a["out_w"] > 1 and a["out_h"] > 0 and a["out_stride_x"] == 0
        elif ins.op == "ADD":
            b["add"] += 1
        elif ins.op == "REQUANT_ADD" and a["count"]:
            b["requant_add"] += 1
            b["requant_add_in_place"] += a["skip_addr"] == a["dst_addr"]
            b["requant_add_relu"] += a["add_relu"]
        elif ins.op == "MUL":
            b["mul"] += 1
            b["mul_broadcast"] += a["count"] > 0 and not a["stride_b"]
            b["mul_count0"] += a["count"] == 0
        elif ins.op == "DWCONV" and a["out_w"] * a["out_h"]:
            b["dwconv"] += 1
            b["dwconv_no_taps"] += a["win_w"] * a["win_h"] == 0
            b["dwconv_strided"] += a["out_w"] > 1 and a["out_stride_x"] > 1
        elif ins.op == "LUT":
            b["lut"] += 1
            b["lut_in_place"] += a["count"] > 0 and a["src_addr"] == a["dst_addr"]
            b["lut_count0"] += a["count"] == 0
            b["lut_chain"] += a["count"] > 0 and (a["src_addr"], a["count"]) in lut_outs
            lut_outs.add((a["dst_addr"], a["count"]))
        elif ins.op in ROWOPS and rowop_accesses(ins.op, a, W):
            b[ins.op.lower()] += 1
            b["softmax_mask"] += ins.op == "SOFTMAX" and a["mask"] == 1
            b["rowop_multirow"] += a["rows"] > 1
            b["rowop_partial_word"] += a["row_len"] % W != 0
            b["rowop_in_place"] += a["src_addr"] == a["dst_addr"]
            (_, s0, s1), (_, d0, d1) = rowop_ranges(ins.op, a, W)[:2]
            b["rowop_overlap"] += a["src_addr"] != a["dst_addr"] and s0 <= d1 and d0 <= s1
        elif ins.op == "NOP" and 0 <= a.get("engine", -1) < len(ENGINE_KEYS):
            b[f"nop_{ENGINE_KEYS[a['engine']]}"] += 1
        if a.get("relu"):
            b["relu"] += 1
        if ins.op in ("REQUANT", "REQUANT_ADD") and a["count"]:
            _requant_shape(a, cfg, b, groups)
        if ins.op in ("REQUANT", "REQUANT_ADD", "ADD", "MUL", "DWCONV", *ROWOPS) or ins.op == "POOL" and a["mode"]:
            qbanks.update(a[f] // 16 for f in ("qreg", "qreg_a", "qreg_b", "qreg_out", "qreg_in") if f in a)
    b["sram_all_banks"] += len(banks) == cfg.sram_banks
    b["sram_full"] += len(loaded) == cfg.sram_words
    b["qreg_all_banks"] += len(qbanks) >= cfg.qreg_banks
    if cfg.lane_groups > 1:
        b["rq_lane_groups_full"] += sum(len(g) == cfg.lane_groups for g in groups.values())
    _pairs(instrs, cfg, feet, b)


def _requant_shape(a: dict, cfg, b: Counter, groups: dict) -> None:
    """The non-square bins (WIDE_BINS, TALL_BINS) of one REQUANT with count > 0."""
    if cfg.requant_planes > 1:
        firsts = [a["dst_addr"] + j * a["dst_plane_stride"] for j in range(cfg.requant_planes)]
        b["rq_planes"] += 1
        b["rq_planes_banks"] += len({w // cfg.bank_words for f in firsts for w in (f, f + a["count"] - 1)}) > 1
        b["rq_planes_gap"] += a["dst_plane_stride"] > a["count"]
    if cfg.lane_groups > 1:
        b["rq_lane_group"] += a["lane_group"] > 0
        groups.setdefault((a["dst_addr"], a["count"]), set()).add(a["lane_group"])


def bursts(a: dict, bb: int) -> int:
    """Number of DDR bursts of a DMA (runs split at ``bb``-aligned DDR boundaries)."""
    return sum((d + n - 1) // bb - d // bb + 1 for d, _, n in dma_runs(a) if n)


def _pairs(instrs, cfg, feet, b: Counter) -> None:
    senders, _ = match_tokens(instrs)
    seq, vcs = vector_clocks(instrs, senders)
    bank_bytes = cfg.bank_bytes
    bset = [{k for sp, lo, hi, _ in f if sp == "sram" for k in range(lo // bank_bytes, (hi - 1) // bank_bytes + 1)}
            for f in feet]
    n = len(senders)
    kind = {0: "dma", 1: "dma", 2: "mxu", 3: "vpu"}
    nb = [bursts(ins.args, cfg.dma_burst_bytes) if ins.op in ("DMA_LOAD", "DMA_STORE") else 0
          for ins in instrs[:n]]
    for i in range(n):
        ei = engine_of(instrs[i])
        if ei is None or instrs[i].op == "NOP":
            continue
        for j in range(i):
            ej = engine_of(instrs[j])
            if ej is None or ej == ei or instrs[j].op == "NOP" or ordered(j, i, instrs, seq, vcs):
                continue
            pair = {kind[ei], kind[ej]}
            if bset[i] & bset[j]:
                for name, want in (("bank_share_mxu_vpu", {"mxu", "vpu"}), ("bank_share_dma_mxu", {"dma", "mxu"}),
                                   ("bank_share_dma_vpu", {"dma", "vpu"})):
                    b[name] += pair == want
            if {ei, ej} == {0, 1} and min(nb[i], nb[j]) >= 2:
                b["dma_both_directions"] += 1
            if "dma" in pair and pair & {"mxu", "vpu"}:
                b["dma_compute_overlap"] += 1
    # DDR read-after-write through a STORE -> LOAD token
    for i in range(n):
        if instrs[i].op != "DMA_LOAD":
            continue
        for j in range(i):
            if instrs[j].op == "DMA_STORE" and ordered(j, i, instrs, seq, vcs):
                rd = [f for f in feet[i] if f[0] == "ddr"]
                wr = [f for f in feet[j] if f[0] == "ddr"]
                if any(lo < h2 and l2 < hi for _, lo, hi, _ in rd for _, l2, h2, _ in wr):
                    b["ddr_raw_chain"] += 1
    hops = [0] * n
    last = [None] * 4
    for i in range(n):
        e = engine_of(instrs[i])
        if e is None:
            continue
        h = hops[last[e]] if last[e] is not None else 0
        for x, j in senders[i].items():
            if j is not None:
                h = max(h, hops[j] + 1)
        hops[i], last[e] = h, i
    if n and max(hops) >= LONG_CHAIN_HOPS:
        b["long_chain"] += max(hops)


class _Resized:
    """``cfg`` with the SRAM and the accumulator ``d`` units (words / rows) larger."""

    def __init__(self, cfg, d: int):
        self._cfg, self._d = cfg, d

    def __getattr__(self, name):
        return getattr(self._cfg, name)

    @property
    def sram_words(self) -> int:
        return self._cfg.sram_words + self._d

    @property
    def sram_size_bytes(self) -> int:
        return self._cfg.sram_size_bytes + self._d * self._cfg.word_bytes

    @property
    def acc_depth_rows(self) -> int:
        return self._cfg.acc_depth_rows + self._d


def _fault_code(ins, cfg) -> str | None:
    fault = start_fault(ins, cfg, frozenset(range(cfg.qreg_count)))    # range checks only
    return fault.code if fault is not None else None


def _at_edge(ins, kind: str, cfg) -> bool:
    """The range fault ``kind`` of ``ins`` is exactly one unit past its limit."""
    if kind == "dma_ddr_range":
        return dma_ddr_end(ins.args) - DDR_ADDR_LIMIT <= ddr_align_bytes(cfg)
    return kind.endswith("_range") and _fault_code(ins, _Resized(cfg, 1)) != kind


def path_bin(kind: str, op: str, field: str) -> str:
    """The bin of one checker path: ``path_<device error>_<opcode>_<field>`` (lower case), e.g.
    ``path_vpu_sram_range_mul_dst_addr``; a deadlock's field is the wait."""
    return f"path_{kind}_{op.lower()}_{field}"


def error_bins(prog, cfg, instrs) -> dict[str, int]:
    """ERROR_BINS of an invalid program (the fault ``validate`` finds first), and the path_bin
    of that fault's checker path (reported, not required)."""
    try:
        validate(prog, cfg)
    except StressError as e:
        if e.kind not in ERROR_KINDS:
            return {}
        out = {f"err_{e.kind}": 1}
        at = instrs[e.index] if e.index is not None and e.index < len(instrs) else None
        if isinstance(at, RawWord):
            at = None                          # the faulting instruction, when it decodes
        if at is not None and e.field is not None:
            out[path_bin(e.kind, at.op, e.field)] = 1
        faulty = {engine_of(ins) for ins in instrs if not isinstance(ins, RawWord) and _fault_code(ins, cfg)}
        if len(faulty) >= 2:
            out["err_double"] = 1
        if at is not None and _at_edge(at, e.kind, cfg):
            out["err_edge"] = 1
        return out
    except IsaError:
        return {"err_reserved_opcode": 1}
    return {}


def edge_bins(instrs, cfg) -> dict[str, int]:
    """EDGE_BINS: valid instructions whose access ends on the last SRAM word/byte or accumulator row."""
    out: Counter = Counter()
    smaller = _Resized(cfg, -1)
    for ins in instrs:
        if isinstance(ins, RawWord) or _fault_code(ins, cfg) is not None:
            continue
        code = _fault_code(ins, smaller)
        if code is not None:
            out["valid_edge_acc" if code.endswith("acc_range") else "valid_edge_sram"] += 1
    return dict(out)


def bins_of(prog, cfg=None) -> dict[str, int]:
    """Static bins of ``prog`` (STATIC_BINS names -> hit counts; only bins hit are listed).
    Runs the golden model to observe data-dependent bins; an invalid program gets only the
    instruction-derived bins."""
    cfg = cfg or config(prog.hw)
    instrs = normalise(prog.instrs)
    b: Counter = Counter()
    b["invalid_unused_bits"] += sum(isinstance(i, RawWord) and unused_bits(i.word) != 0 for i in instrs)
    _static(prog, cfg, instrs, b)
    obs = _Observer(cfg)
    try:
        run_golden(prog, cfg, observe=obs)
    except StressError:
        pass
    b.update(obs.bins)
    b.update(edge_bins(instrs, cfg))
    if prog.invalid:
        b.update(error_bins(prog, cfg, instrs))
    return {k: int(v) for k, v in sorted(b.items()) if v}


__all__ = ["ALL_BINS", "STATIC_BINS", "DYNAMIC_BINS", "INVALID_BINS", "WIDE_BINS", "TALL_BINS", "shape_bins", "ERROR_BINS", "ERROR_KINDS", "EDGE_BINS",
           "required_bins", "bins_of", "error_bins", "path_bin", "edge_bins", "observed_bins", "tie_mask",
           "DRAIN_BINS", "drain_bins", "DMA_BINS", "dma_bins"]
