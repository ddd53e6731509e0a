"""Per-layer SRAM tiling: output strips (rows, and column strips where needed), channel blocks,
SRAM regions with double buffering, accumulator budget.

SRAM (``sram_words`` words of W bytes, address-partitioned banks) holds per layer:
  conv:  ``nw`` weight slots of C words (ring; bank-aligned so the DMA filling one slot and the
         MXU reading the other use different banks), 2 requant-table slots, 2 output slots
         (REQUANT destination, drained by STORE; ``requant_planes`` words per accumulator row on
         a wide array), ``ni`` input slots of ``kbg`` cin blocks of an
         (ih x iw) input window.
  vector-unit ops (pool, add): two slot groups (double buffering) of the regions the op
         names (``tile_vector`` searches the tile, the op module gives the cost and the sizes).
The accumulator holds ``nbg`` cout blocks of one M = th*tw output tile (M*nbg <= depth); if two
such groups fit, MATMULs alternate between the two halves so REQUANT overlaps the next tile.

The tilers enumerate candidates and keep the one with the smallest estimated time (DMA bytes
over the LOAD channel's bandwidth vs. MXU cycles). CompileError naming the node if none fits.
Every tiling record has ``regions`` (name -> slot base words), ``slot_words`` (name -> words of
one slot) and ``acc_rows`` (accumulator rows per half), which the tiling verifier checks.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from tpucompile.backend.layout import align_px, ceil_div, out_tiles, round_up
from tpusim.arch.config import HwConfig
from tpusim.arch.errors import CompileError
from tpusim.arch.isa import OPCODES
from tpusim.arch.limits import TOKEN_MAX


@dataclass
class ConvTiling:
    """Tiling of a conv on the array (module docstring): th x tw output pixels per tile, nbg cout
    blocks and kbg cin blocks per group, ni input slots of an ih x iw window, nw weight slots;
    regions: name -> slot base word addresses ("w", "p", "o", "i")."""
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
    aligned: bool = False
    slot_words: dict = field(default_factory=dict)   # name -> words of each slot of that region

    @property
    def acc_rows(self) -> int:
        """Accumulator rows of one output tile (nbg cout blocks of M = th*tw rows)."""
        return self.nbg * self.th * self.tw


@dataclass
class EltTiling:
    """Tiling of a vector-unit op: th x tw output pixels x kbg channel blocks per tile, reading
    an ih x iw input window; regions/slot_words as in ConvTiling (two slots each)."""
    th: int
    tw: int
    kbg: int
    ih: int = 0
    iw: int = 0
    regions: dict = field(default_factory=dict)
    est_cycles: float = 0.0
    slot_words: dict = field(default_factory=dict)
    acc_rows = 0


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
    n = min(bb, 1 << 20)
    t = (3 + cfg.ddr_latency_cycles + n // cfg.ddr_beat_bytes - 1) * ddr_ps + 7 * dma_ps \
        + (3 + n // cfg.word_bytes) * core_ps
    return n / (t / core_ps)


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


def out_slot_words(cfg: HwConfig, M: int) -> int:
    """REQUANT/STORE chunk (accumulator rows): two of them (``requant_planes`` words a row) and
    two requant-table slots (``table_slot_words``) share one bank when possible."""
    ap = align_px(cfg)
    cap = max(ap, (cfg.bank_words - 2 * table_slot_words(cfg)) // (2 * cfg.requant_planes), 16)
    return max(1, min(M, cap - cap % ap if cap >= ap else ap))


def table_slot_words(cfg: HwConfig) -> int:
    """Words of a conv's requant-table slot: the tables of one output channel block's N tiles
    (``lane_groups`` of them, packed ``param_words`` apart; one on a square or wide array)."""
    return cfg.lane_groups * cfg.param_words


def _wstride(cfg: HwConfig) -> int:
    C, bw = cfg.array_cols, cfg.bank_words
    return round_up(C, bw) if 2 * C > bw else C


def conv_regions(cfg: HwConfig, nw: int, s_out: int, ni: int, slot: int, aligned: bool):
    """Region bases, or None if they do not fit. aligned: weights, (tables + outputs) and each
    input slot start on their own bank, so the DMA filling one never waits for a MATMUL reading
    another (the MXU holds every bank of its input window for M cycles)."""
    a = _Alloc(cfg)
    bw = cfg.bank_words
    a.take("w", nw, cfg.array_cols, bank_align=2 * cfg.array_cols > bw)
    if aligned:
        a.top = round_up(a.top, bw)
    a.take("p", 2, table_slot_words(cfg))
    a.take("o", 2, cfg.requant_planes * s_out)
    slots = []
    for _ in range(ni):
        if aligned:
            a.top = round_up(a.top, bw)
        slots.append(a.top)
        a.top += slot
    a.regions["i"] = slots
    return a.regions if a.top <= cfg.sram_words else None


#: tokens below the token limit a conv group leaves for other pairs in flight at its boundaries
TOKEN_MARGIN = 4


def max_cout_blocks_per_group(cfg: HwConfig) -> int:
    """Most cout blocks one accumulator group may hold: every block's last MATMUL signals the VPU
    once and the group's REQUANTs only follow all its MATMULs, so nbg MXU->VPU tokens are
    outstanding at once; they must stay under the token limit (a wide FC layer, M = 1, could
    otherwise put 251+ blocks in one group: ``emit.Program.token_limit``)."""
    return TOKEN_MAX - cfg.queue_depth - 1 - TOKEN_MARGIN


def tile_conv(node: str, kernel, strides, cin: int, cout: int, oh: int, ow: int, cfg: HwConfig) -> ConvTiling:
    """The cheapest conv tiling (module docstring). Non-square arrays: NB = ``out_tiles`` N
    tiles; a group holds whole output channel blocks (nbg a multiple of ``lane_groups``); output
    slots hold ``requant_planes`` words per accumulator row, table slots ``table_slot_words``."""
    R, C = cfg.array_rows, cfg.array_cols
    W = cfg.word_bytes
    ap = align_px(cfg)
    kh, kw = kernel
    sh, sw = strides
    KB, NB, T = ceil_div(cin, R), out_tiles(cout, cfg), kh * kw
    pw, mg, mp = cfg.param_words, cfg.lane_groups, cfg.requant_planes
    tsw = table_slot_words(cfg)
    bwd = cfg.bank_words
    bw = load_bw(cfg)
    wgrp = round_up(2 * _wstride(cfg), bwd)
    sram_words, acc_depth, max_nbg = cfg.sram_words, cfg.acc_depth_rows, max_cout_blocks_per_group(cfg)
    nb_cands, kb_cands, th_cands = _pow_cands(NB), _pow_cands(KB), _cands(oh)
    best = None
    for tw in _cands(ow, ap):
        for th in th_cands:
            M = th * tw
            if M > acc_depth:
                continue
            ih = (th - 1) * sh + kh
            iw = (tw - 1) * sw + kw + (ap - 1)
            ntiles = ceil_div(oh, th) * ceil_div(ow, tw)
            s_out = out_slot_words(cfg, M)
            pogrp = round_up(2 * tsw + 2 * mp * s_out, bwd)
            for nbg in nb_cands:
                if M * nbg > acc_depth or nbg > max_nbg or nbg % mg:
                    continue
                ngrp = ceil_div(NB, nbg)
                for kbg in kb_cands:
                    nkg = ceil_div(KB, kbg)
                    slot = kbg * ih * iw
                    for ni in (2, 1):
                        packed = 2 * C + 2 * tsw + 2 * mp * s_out + ni * slot
                        if packed > sram_words:
                            continue
                        aligned = wgrp + pogrp + ni * round_up(slot, bwd) <= sram_words
                        in_b = ntiles * (1 if nkg == 1 else ngrp) * KB * ih * ((tw - 1) * sw + kw) * W
                        w_b = ntiles * NB * KB * T * C * W
                        p_b = ntiles * NB * pw * W
                        n_dma = ntiles * ((1 if nkg == 1 else ngrp) * nkg + NB * KB * T + NB)
                        load_t = (in_b + w_b + p_b) / bw + 40 * n_dma
                        mxu_t = ntiles * NB * KB * T * (C + M + R + C + 6)
                        vpu_t = ntiles * NB * (mp * M + pw * ceil_div(M, s_out))
                        est = max(load_t, mxu_t, vpu_t)
                        if not aligned:   # bank conflicts: the LOAD channel waits behind MATMULs
                            est += 0.3 * min(load_t, mxu_t)
                        if ni == 1:   # the next window's load waits for this one's last MATMUL
                            est += ntiles * (1 if nkg == 1 else ngrp) * KB * ih * iw * W / bw
                        if best is None or est < best.est_cycles:
                            best = ConvTiling(th, tw, nbg, kbg, ni, 2, s_out, ih, iw,
                                              est_cycles=est, load_bytes=in_b + w_b + p_b)
                            best.aligned = aligned
    if best is None:
        raise CompileError(f"QConv {node!r} ({cin}->{cout}, kernel {kh}x{kw}, stride {sh}x{sw}, "
                           f"output {oh}x{ow}) cannot be tiled into the {cfg.sram_words}-word SRAM of "
                           f"config '{cfg.name}' (even a one-pixel tile needs {2 * C + 2 * tsw + 2 * mp + kh * (kw + ap - 1)} "
                           f"words: double-buffered weight tiles, requant tables, input window)")
    slot = best.kbg * best.ih * best.iw
    for aligned in ((True, False) if best.aligned else (False,)):
        for nw in (4, 3, 2):
            regs = conv_regions(cfg, nw, best.s_out, best.ni, slot, aligned)
            if regs is not None:
                best.nw, best.regions, best.aligned = nw, regs, aligned
                break
        if best.regions:
            break
    if not best.regions:
        raise CompileError(f"QConv {node!r}: internal SRAM allocation failed")
    best.acc_halves = 2 * best.nbg * best.th * best.tw <= cfg.acc_depth_rows
    best.slot_words = {"w": C, "p": tsw, "o": mp * best.s_out, "i": slot}
    return best


def field_max(opcode: str, field: str) -> int:
    """Largest value of an unsigned instruction field (tpusim.arch.isa.OPCODES)."""
    spec = next(f for f in OPCODES[opcode].fields if f.name == field)
    return (1 << spec.bits) - 1


def tile_vector(nblocks: int, kernel, strides, oh: int, ow: int, cfg: HwConfig, cost) -> EltTiling | None:
    """The cheapest tile of a vector-unit op (pool, add): th output rows x tw columns (tw a multiple
    of ``align_px`` unless it is the whole row) x kbg channel blocks, reading an ih x iw input
    window (iw with ``align_px - 1`` columns of slack for the aligned DMA).

    cost(th, tw, ih, iw, kbg, ntiles) -> estimated cycles of the op with that tile, or None if
    it does not fit. Returns None if no tile fits."""
    ap = align_px(cfg)
    kh, kw = kernel
    sh, sw = strides
    best = None
    for tw in _cands(ow, ap):
        for th in _cands(oh):
            ih = (th - 1) * sh + kh
            iw = (tw - 1) * sw + kw + (ap - 1)
            for kbg in _pow_cands(nblocks):
                nt = ceil_div(oh, th) * ceil_div(ow, tw) * ceil_div(nblocks, kbg)
                est = cost(th, tw, ih, iw, kbg, nt)
                if est is not None and (best is None or est < best.est_cycles):
                    best = EltTiling(th, tw, kbg, ih, iw, est_cycles=est)
    return best


def place_slot_groups(tl: EltTiling, sizes: dict, cfg: HwConfig) -> None:
    """Two slot groups (double buffering) of the regions ``sizes`` (name -> words), each group on
    its own banks when that fits, else packed; sets ``tl.regions`` and ``tl.slot_words``."""
    for aligned in (True, False):
        a = _Alloc(cfg)
        regs = {k: [] for k in sizes}
        for j in range(2):      # slot group j: everything one tile touches, on its own banks
            if aligned:
                a.top = round_up(a.top, cfg.bank_words)
            for k, n in sizes.items():
                regs[k].append(a.top)
                a.top += n
        if a.top <= cfg.sram_words:
            break
    tl.regions, tl.slot_words = regs, dict(sizes)


def tile_vector_buffered(nblocks: int, kernel, strides, oh: int, ow: int, cfg: HwConfig, cost, words) -> EltTiling | None:
    """``tile_vector`` with two slot groups (double buffering) if a tile fits so, else with one
    (the next tile's loads then wait for this tile's work: slower, but a large window still
    compiles), placed by ``place_slot_groups`` or packed single. ``cost(th, tw, ih, iw, kbg, nt,
    groups)`` -> cycles or None; ``words(tl)`` -> {region: words of one slot}. None if neither
    fits."""
    for groups in (2, 1):
        tl = tile_vector(nblocks, kernel, strides, oh, ow, cfg,
                         lambda th, tw, ih, iw, kbg, nt, g=groups: cost(th, tw, ih, iw, kbg, nt, g))
        if tl is None:
            continue
        sizes = words(tl)
        if groups == 2:
            place_slot_groups(tl, sizes, cfg)
        else:
            top, regs = 0, {}
            for k, n in sizes.items():
                regs[k] = [top, top]          # both "slots" the same words: the Program's tokens
                top += n                      # order each reuse after the last access
            tl.regions, tl.slot_words = regs, dict(sizes)
        return tl
    return None


class EltTile(NamedTuple):
    """One tile of a lane-wise op: channel blocks k0 .. k0 + nk - 1, output rows oy0 .. oy0 + th - 1,
    columns ox0 .. ox0 + tw - 1, in slot group ``slot`` (0 / 1, alternating); ``words`` = nk*th*tw."""
    k0: int
    nk: int
    oy0: int
    th: int
    ox0: int
    tw: int
    slot: int

    @property
    def words(self) -> int:
        return self.nk * self.th * self.tw


def elt_tiles(nblocks: int, oh: int, ow: int, tl: EltTiling):
    """The tiles of a lane-wise op (Add, LUT) over ``nblocks`` channel blocks of an oh x ow
    output, in emission order: channel groups outer, rows, then columns; slots alternate."""
    slot = 0
    for k0 in range(0, nblocks, tl.kbg):
        nk = min(nblocks, k0 + tl.kbg) - k0
        for oy0 in range(0, oh, tl.th):
            th = min(tl.th, oh - oy0)
            for ox0 in range(0, ow, tl.tw):
                yield EltTile(k0, nk, oy0, th, ox0, min(tl.tw, ow - ox0), slot)
                slot ^= 1


def untileable(what: str, kernel, oh: int, ow: int, cfg: HwConfig) -> CompileError:
    """The refusal of a vector-unit op no tile of which fits the SRAM."""
    kh, kw = kernel
    return CompileError(f"{what} (window {kh}x{kw}, output {oh}x{ow}) cannot be tiled into the "
                        f"{cfg.sram_words}-word SRAM of config '{cfg.name}'")
