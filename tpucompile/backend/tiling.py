"""Per-layer SRAM tiling: output strips (rows, and column strips where needed), channel blocks,
SRAM regions with double buffering, accumulator budget.

SRAM (``sram_words`` words of W bytes, address-partitioned banks) holds per layer:
  conv:  ``nw`` weight slots of C words (ring; bank-aligned so the DMA filling one slot and the
         MXU reading the other use different banks), 2 requant-table slots, 2 output slots
         (REQUANT destination, drained by STORE), ``ni`` input slots of ``kbg`` cin blocks of an
         (ih x iw) input window.
  pool:  2 input slots, 2 output slots (kbg channel blocks each).
  add:   2 slots for each operand, 2 output slots.
The accumulator holds ``nbg`` cout blocks of one M = th*tw output tile (M*nbg <= depth); if two
such groups fit, MATMULs alternate between the two halves so REQUANT overlaps the next tile.

The tiler enumerates candidates and keeps the one with the smallest estimated time (DMA bytes
over the LOAD channel's bandwidth vs. MXU cycles). CompileError naming the node if none fits.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tpusim.config import HwConfig
from tpusim.errors import CompileError
from tpucompile.backend.layout import ActLayout, align_px, ceil_div, round_up


@dataclass
class ConvTiling:
    th: int
    tw: int
    nbg: int
    kbg: int
    ni: int
    nw: int
    s_out: int
    ih: int
    iw: int
    regions: dict = field(default_factory=dict)   # name -> list of slot base word addresses
    acc_halves: bool = False
    est_cycles: float = 0.0
    load_bytes: int = 0


@dataclass
class EltTiling:
    th: int
    tw: int
    kbg: int
    ih: int = 0
    iw: int = 0
    regions: dict = field(default_factory=dict)
    est_cycles: float = 0.0


def _cands(n: int, step: int = 1) -> list:
    """Distinct tile sizes ceil(n/k) (rounded up to step), largest first."""
    out = []
    for k in range(1, n + 1):
        v = min(n, round_up(ceil_div(n, k), step))
        if v not in out:
            out.append(v)
        if v <= step:
            break
    return out


def _pow_cands(n: int) -> list:
    out, k = [], 1
    while True:
        v = ceil_div(n, k)
        if v not in out:
            out.append(v)
        if v == 1:
            return out
        k *= 2


def load_bw(cfg: HwConfig) -> float:
    """Rough LOAD-channel bandwidth, bytes per core cycle (one burst at a time, see architecture.md)."""
    bb = cfg.dma_burst_bytes
    ddr_ps = 1e6 / cfg.clk_ddr.freq_mhz
    dma_ps = 1e6 / cfg.clk_dma.freq_mhz
    core_ps = 1e6 / cfg.clk_core.freq_mhz
    t = (cfg.ddr_latency_cycles + bb // cfg.ddr_beat_bytes) * ddr_ps + 4 * dma_ps + 4 * core_ps
    return bb / (t / core_ps)


class _Alloc:
    """Sequential SRAM region allocator (word addresses)."""

    def __init__(self, cfg: HwConfig):
        self.cfg = cfg
        self.top = 0
        self.regions = {}

    def take(self, name: str, count: int, words: int, bank_align: bool = False) -> bool:
        bw = self.cfg.bank_words
        bases = []
        for _ in range(count):
            if bank_align:
                a = min(bw, words)
                self.top = round_up(self.top, a)
            bases.append(self.top)
            self.top += words
        self.regions[name] = bases
        return self.top <= self.cfg.sram_words


def out_slot_words(cfg: HwConfig, M: int, tw: int) -> int:
    ap = align_px(cfg)
    cap = max(round_up(64, ap), cfg.sram_words // 16)
    return max(1, min(M, cap))


def tile_conv(node: str, kernel, strides, cin: int, cout: int, oh: int, ow: int, cfg: HwConfig,
              in_pad_l_extra: int = 0) -> ConvTiling:
    R, C = cfg.array_rows, cfg.array_cols
    W = cfg.word_bytes
    ap = align_px(cfg)
    kh, kw = kernel
    sh, sw = strides
    KB, NB, T = ceil_div(cin, R), ceil_div(cout, C), kh * kw
    pw = cfg.param_words
    bw = load_bw(cfg)
    best = None
    for tw in _cands(ow, ap):
        for th in _cands(oh):
            M = th * tw
            if M > cfg.acc_depth_rows:
                continue
            ih = (th - 1) * sh + kh
            iw = (tw - 1) * sw + kw + (ap - 1)
            ntiles = ceil_div(oh, th) * ceil_div(ow, tw)
            s_out = out_slot_words(cfg, M, tw)
            for nbg in _pow_cands(NB):
                if M * nbg > cfg.acc_depth_rows:
                    continue
                ngrp = ceil_div(NB, nbg)
                for kbg in _pow_cands(KB):
                    nkg = ceil_div(KB, kbg)
                    for ni in (2, 1):
                        words = 2 * C + 2 * pw + 2 * s_out + ni * kbg * ih * iw + (C if C < cfg.bank_words else 2 * C)
                        if words > cfg.sram_words:
                            continue
                        in_b = ntiles * (1 if nkg == 1 else ngrp) * KB * ih * ((tw - 1) * sw + kw) * W
                        w_b = ntiles * NB * KB * T * C * W
                        p_b = ntiles * NB * pw * W
                        n_dma = ntiles * ((1 if nkg == 1 else ngrp) * nkg + NB * KB * T + NB)
                        load_t = (in_b + w_b + p_b) / bw + 40 * n_dma
                        mxu_t = ntiles * NB * KB * T * (C + M + R + C + 6)
                        vpu_t = ntiles * NB * (M + pw * ceil_div(M, s_out))
                        est = max(load_t, mxu_t, vpu_t)
                        if ni == 1:
                            est += ntiles * nkg * (KB // nkg) * ih * iw * W / bw * 0.5
                        if best is None or est < best.est_cycles:
                            best = ConvTiling(th, tw, nbg, kbg, ni, 2, s_out, ih, iw,
                                              est_cycles=est, load_bytes=in_b + w_b + p_b)
    if best is None:
        raise CompileError(f"QConv {node!r} ({cin}->{cout}, kernel {kh}x{kw}, stride {sh}x{sw}, "
                           f"output {oh}x{ow}) cannot be tiled into the {cfg.sram_words}-word SRAM of "
                           f"config '{cfg.name}' (even one output pixel needs {2 * C + 2 * pw + 2 + kh * (kw + ap - 1)} "
                           f"words with double-buffered weights)")
    # regions: weights first (bank aligned), then params, outputs, inputs; spare room -> more weight slots
    for nw in (4, 3, 2):
        a = _Alloc(cfg)
        a.take("w", nw, C, bank_align=True)
        a.take("p", 2, pw)
        a.take("o", 2, best.s_out)
        ok = a.take("i", best.ni, best.kbg * best.ih * best.iw)
        if ok:
            best.nw, best.regions = nw, a.regions
            break
    else:
        raise CompileError(f"QConv {node!r}: internal SRAM allocation failed")
    best.acc_halves = 2 * best.nbg * best.th * best.tw <= cfg.acc_depth_rows
    return best


def tile_elementwise(node: str, kind: str, nblocks: int, kernel, strides, oh: int, ow: int,
                     cfg: HwConfig) -> EltTiling:
    """Pools (kind 'pool') and adds (kind 'add'): rows x cols tiles of kbg channel blocks."""
    ap = align_px(cfg)
    kh, kw = kernel
    sh, sw = strides
    W = cfg.word_bytes
    bw = load_bw(cfg)
    best = None
    for tw in _cands(ow, ap):
        for th in _cands(oh):
            ih = (th - 1) * sh + kh
            iw = (tw - 1) * sw + kw + (ap - 1)
            if kh > 255 or kw > 255:
                continue
            for kbg in _pow_cands(nblocks):
                if kind == "add":
                    words = 2 * kbg * th * tw * 3
                    if kbg * th * tw > 65535:
                        continue
                else:
                    words = 2 * kbg * ih * iw + 2 * kbg * th * tw
                if words > cfg.sram_words:
                    continue
                nt = ceil_div(oh, th) * ceil_div(ow, tw) * ceil_div(nblocks, kbg)
                inb = nt * kbg * ih * iw * W * (2 if kind == "add" else 1)
                est = inb / bw + 60 * nt * (3 if kind == "add" else 2 + kbg)
                if best is None or est < best.est_cycles:
                    best = EltTiling(th, tw, kbg, ih, iw, est_cycles=est)
    if best is None:
        raise CompileError(f"{'QAdd' if kind == 'add' else 'pool'} {node!r} (window {kh}x{kw}, output "
                           f"{oh}x{ow}) cannot be tiled into the {cfg.sram_words}-word SRAM of config "
                           f"'{cfg.name}'")
    a = _Alloc(cfg)
    n_o = best.kbg * best.th * best.tw
    if kind == "add":
        a.take("a", 2, n_o)
        a.take("b", 2, n_o)
    else:
        a.take("i", 2, best.kbg * best.ih * best.iw)
    a.take("o", 2, n_o)
    best.regions = a.regions
    return best
