"""Per-layer SRAM tiling: output strips (rows, and column strips where needed), channel blocks,
SRAM regions with double buffering, accumulator budget.

SRAM (``sram_words`` words of W bytes, address-partitioned banks) holds per layer:
  conv:  ``nres`` resident weight slots of C words (one per weight tile of the layer whose
         tiles fit, else as many as fit; each loaded once, read by every spatial tile), then
         ``nw`` streaming weight slots (ring, none if all are resident; bank-aligned so the DMA
         filling one slot and the MXU reading the other use different banks; with merged weight
         DMAs, ``wbatch`` > 1, two halves of ``wbatch`` slots, each from a bank's start); 2
         requant-table slots, 2 output slots
         (REQUANT destination, drained by STORE; ``requant_planes`` words per accumulator row on
         a wide array; with a fused Add's skip slots in two bank-aligned parity groups where
         they fit, ``conv_regions(split=True)``), ``ni`` input slots of ``kbg`` cin blocks of an
         (ih x iw) input window; a conv with a fused residual Add (ops/conv_add.py) also
         ``SKIP_SLOTS`` skip slots of an output slot's size.
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

import math
from dataclasses import dataclass, field
from functools import lru_cache
from types import SimpleNamespace
from typing import NamedTuple

import numpy as np

from tpucompile.backend.layout import align_px, ceil_div, out_tiles, round_up, window_rows
from tpucompile.backend.work import mxu_pair_cycles
from tpusim.arch.config import HwConfig
from tpusim.arch.dma_timing import DmaTiming
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
    nres: int = 0    # resident weight tiles (the first nres; each loaded once): slots w[0 .. nres-1]
    pool_th: int = 0  # a fused pool (ops/conv_pool.py): pooled outputs per tile (rows, columns); 0 without
    pool_tw: int = 0
    wbatch: int = 1  # streaming weight tiles per DMA_LOAD (``weight_batch_tiles``; 1: one DMA per tile)

    #: the fields the conv work hooks (``ops/conv.py`` ``_work`` and those built on it: conv_add,
    #: conv_pool, act_matmul) read: two tilings that agree on them give the same LayerWork (the
    #: estimator shares the work record of tilings that differ only in slot addresses, alignment or
    #: the tiler's own guesses)
    WORK_FIELDS = ("th", "tw", "nbg", "kbg", "ni", "s_out", "acc_halves", "nres", "pool_th", "pool_tw", "wbatch")

    @property
    def wres(self) -> bool:
        """Weights (some or all) resident: ``nres`` > 0."""
        return self.nres > 0

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


@lru_cache(maxsize=4096)
def _cands(n: int, step: int = 1) -> tuple:
    """Distinct tile sizes ceil(n/k) (rounded up to step), largest first."""
    out = []
    for k in range(1, n + 1):
        v = min(n, round_up(ceil_div(n, k), step))
        if v not in out:
            out.append(v)
        if v <= step:
            break
    return tuple(out)


@lru_cache(maxsize=4096)
def _pow_cands(n: int) -> tuple:
    """Distinct tile sizes ceil(n / 2^j), largest first."""
    out, k = [], 1
    while True:
        v = ceil_div(n, k)
        if v not in out:
            out.append(v)
        if v == 1:
            return tuple(out)
        k *= 2


@lru_cache(maxsize=4096)
def nbg_cands(n: int) -> tuple:
    """Cout blocks per group the conv tiler weighs for ``n`` blocks: the halvings
    (``_pow_cands``), then every other ``ceil(n / groups)`` (``_cands``), each largest first. A
    window of several cin groups is loaded once per cout group: bert-base's Q/K/V projection
    (36 blocks of 128 tokens, 8 of which fill the accumulator) needs 5 groups with 8 blocks, 8
    with the halvings' 5. The halvings come first so that of equal estimates the tiler keeps
    the group it chose before (the first cheapest wins). The others are weighed only for one
    tile over a one-row output (a transformer's linear over its whole (1, C, 1, T) sequence):
    elsewhere they would change ResNet-50's tilings on 'small' (its 7x7 stage, one tile: 10
    blocks a group instead of 8, 9 convs; with several tiles 24 of 56), not measured yet."""
    pw = _pow_cands(n)
    return pw + tuple(v for v in _cands(n) if v not in pw)


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
    """Sequential SRAM region allocator (word addresses). ``lists``: each region's slot bases a
    list (else a range or tuple of them: enough to tell whether the regions fit, cheaper)."""

    def __init__(self, cfg: HwConfig, lists: bool = True):
        self.cfg = cfg
        self.bank_words, self.sram_words = cfg.bank_words, cfg.sram_words    # (read once: ``take`` reads them)
        self.top = 0
        self.regions = {}
        self.lists = lists

    def take(self, name: str, count: int, words: int, bank_align: bool = False) -> bool:
        """``count`` slots of ``words`` words from the top, each from a multiple of
        ``min(bank_words, words)`` if ``bank_align`` (so ``round_up(words, that)`` apart)."""
        step = words
        if count and bank_align:
            a = min(self.bank_words, words)
            self.top, step = round_up(self.top, a), round_up(words, a)
        bases = range(self.top, self.top + count * step, step) if step else (self.top,) * count
        self.regions[name] = list(bases) if self.lists else bases
        if count:
            self.top += (count - 1) * step + words
        return self.top <= self.sram_words


def out_slot_words(cfg: HwConfig, M: int) -> int:
    """REQUANT/STORE chunk (accumulator rows): two of them (``requant_planes`` words a row) and
    two requant-table slots (``table_slot_words``) share one bank when possible."""
    return max(1, min(M, _out_slot_cap(align_px(cfg), cfg.bank_words, table_slot_words(cfg), cfg.requant_planes)))


def _out_slot_cap(ap: int, bank_words: int, table_words: int, planes: int) -> int:
    """``out_slot_words``' bound on the chunk (accumulator rows), a multiple of ``ap`` pixels."""
    cap = max(ap, (bank_words - 2 * table_words) // (2 * planes), 16)
    return cap - cap % ap if cap >= ap else ap


def table_slot_words(cfg: HwConfig) -> int:
    """Words of a conv's requant-table slot: the tables of one output channel block's N tiles
    (``lane_groups`` of them, packed ``param_words`` apart; one on a square or wide array)."""
    return cfg.lane_groups * cfg.param_words


def _wstride(cols: int, bank_words: int) -> int:
    """Words between two of ``conv_regions``' weight slots of ``cols`` words: each aligned to
    ``min(bank_words, cols)`` when two do not fit one bank, else packed."""
    return round_up(cols, min(bank_words, cols)) if 2 * cols > bank_words else cols


#: bursts one weight DMA_LOAD should move: a DMA instruction pays a DDR round trip (~54 ns on
#: seed-like chips) before its first burst lands and starts with empty burst buffers, while a
#: 256-byte burst holds the bus 10 ns, so a 1 KiB weight tile ('medium') moved at ~8.6 B/cycle of
#: the 25.6 B/cycle peak; 32 bursts per DMA amortise that (``weight_batch_tiles``; independent of
#: ``dma.outstanding``, which the tilers never read; measured on 'medium' ResNet-50,
#: docs/backend.md "Merged weight DMAs")
WEIGHT_DMA_BURSTS = 32


def weight_batch_tiles(cfg: HwConfig) -> int:
    """Streaming weight tiles one DMA_LOAD brings (>= 1): ``WEIGHT_DMA_BURSTS`` bursts over a
    tile's ``C * W`` bytes, rounded down (seed, 128x128: a 16 KiB tile is already 64 bursts, 1;
    'medium', 32x32: 8; 'small', 8x8 with 64-byte bursts: 32)."""
    return max(1, WEIGHT_DMA_BURSTS * cfg.dma_burst_bytes // (cfg.array_cols * cfg.word_bytes))


def tile_dma_cycles(cfg: HwConfig) -> float:
    """Core cycles one DMA_LOAD of a single weight tile (``C * W`` bytes) takes, as ``load_bw``
    prices a burst: the DDR round trip (3 + latency + beats − 1 DDR cycles), 7 DMA cycles of
    crossings and the SRAM write (3 + words core cycles); 'medium': 120 (measured ~119: 1 KiB at
    8.6 B/cycle). Merged weight DMAs pay off where a LOAD_WEIGHTS + MATMUL pair is shorter."""
    C = cfg.array_cols
    n, core_ps = C * cfg.word_bytes, 1e6 / cfg.clk_core.freq_mhz
    t = (3 + cfg.ddr_latency_cycles + -(-n // cfg.ddr_beat_bytes) - 1) * (1e6 / cfg.clk_ddr.freq_mhz) \
        + 7 * (1e6 / cfg.clk_dma.freq_mhz) + (3 + C) * core_ps
    return t / core_ps


#: core cycles the tilers' rough cost model charges per DMA instruction besides its bytes over
#: ``load_bw`` (``conv_dma_price``: the conv tiler's own price where weight batches exist)
DMA_INSTR_CYCLES = 40


#: the DMA fields ``_dma_price`` reads -> its result
_DMA_PRICES: dict = {}

#: bursts in flight the conv tiler's DMA price assumes (the seed family's ``dma.outstanding``):
#: the tilers never read ``dma.outstanding``, so the estimator shares tilings across it
PRICE_OUTSTANDING = 8


#: share of the lesser of a conv candidate's LOAD and MXU times added to its estimate at the
#: idle-chip DMA price (``_dma_price``): the engines wait for each other (tokens, banks, the
#: shared DDR bus), so two busy engines do not overlap fully; without it the tiler took a
#: window read once per cout group with two input slots over one slot read once where LOAD and
#: MXU balance (medium squeezenet's classifier conv 133 k -> 173 k cycles); 0.3: medium
#: ResNet-50 7,253,138, 0.15: 7,199,688 (docs/backend.md "DMA-priced conv tiling")
OVERLAP_SHARE = 0.15


def _dma_price(cfg: HwConfig) -> tuple:
    """(bytes per core cycle, core cycles per instruction, ``OVERLAP_SHARE``) of LOAD
    instructions as ``tpusim.arch.dma_timing`` times them on an idle chip with
    ``PRICE_OUTSTANDING`` bursts in flight: the steady-state rate of a long instruction (bursts
    32 to 64) and what a one-burst instruction takes beyond it (its round trip). 'medium':
    25.6 B/cycle (the DDR peak: the bursts' SRAM writes queue in the core domain, 9 cycles per
    256 bytes; 14.6 B/cycle when each waited for the previous one's completion to cross back)
    and 50 cycles per instruction. Cached by the fields it reads (the estimator's config view is not
    hashable and records those reads)."""
    key = (cfg.clk_core, cfg.clk_ddr, cfg.clk_dma, cfg.dma_burst_bytes, cfg.ddr_beat_bytes, cfg.word_bytes,
           cfg.ddr_latency_cycles)
    out = _DMA_PRICES.get(key)
    if out is None:
        fields = ("clk_core", "clk_ddr", "clk_dma", "dma_burst_bytes", "ddr_beat_bytes", "word_bytes",
                  "ddr_latency_cycles")
        d = DmaTiming(SimpleNamespace(name="price", dma_outstanding=PRICE_OUTSTANDING, **dict(zip(fields, key))))
        core_ps = 1e6 / cfg.clk_core.freq_mhz
        steady = (d.load_ps(64) - d.load_ps(32)) / 32 / core_ps
        out = _DMA_PRICES[key] = (cfg.dma_burst_bytes / steady, d.load_ps(1) / core_ps - steady, OVERLAP_SHARE)
    return out


def conv_dma_price(cfg: HwConfig) -> tuple:
    """(LOAD bytes per core cycle, cycles per DMA instruction, overlap share:
    ``ConvCandidates.est_cycles``) the conv tiler prices candidates at: where weight batches
    exist (``weight_batch_tiles`` > 1: small arrays, whose LOADs the per-instruction round trip
    dominates) the idle-chip DMA timing (``_dma_price``; the rough
    ``load_bw`` prices one burst at a time, ~3.9 B/cycle on 'medium' against ~9 to 14.6
    measured, and made the tiler trade MXU time for bytes), else ``load_bw`` and
    ``DMA_INSTR_CYCLES`` as before (seed: unchanged)."""
    if weight_batch_tiles(cfg) > 1:
        return _dma_price(cfg)
    return rough_dma_price(cfg)


def rough_dma_price(cfg: HwConfig) -> tuple:
    """(``load_bw``, ``DMA_INSTR_CYCLES``, 0): the price the vector-unit tilers charge, and the conv
    tiler where no weight batch exists or for a fused pool (whose fusion is weighed against the
    pool's own ``load_bw`` estimate, ``ops/pool.py``)."""
    return load_bw(cfg), float(DMA_INSTR_CYCLES), 0.0


#: slots of a fused residual Add's skip tiles (``ops/conv_add.py``): with the two output slots a
#: ring of SKIP_SLOTS + 2 slots, the LOAD of chunk j + SKIP_SLOTS + 2 waits for chunk j's STORE
#: (medium ResNet-50: 2 slots 5,045,695 cycles, 4 slots 5,035,545, 6 slots 5,071,628)
SKIP_SLOTS = 4


def weight_region_words(n, cols: int, bank_words: int):
    """Words ``conv_regions`` gives ``n`` (int or int64 array, >= 1) weight slots of ``cols``
    words from address 0 (each slot aligned to ``min(bank_words, cols)`` when two do not fit one
    bank: slots ``round_up(cols, that)`` apart)."""
    return (n - 1) * _wstride(cols, bank_words) + cols


def resident_tiles(total: int, cols: int, bank_words: int, free_words: int) -> int:
    """Weight tiles kept resident in ``free_words`` words of SRAM: all ``total`` if their slots
    fit, else as many as fit next to a streaming ring of two slots (0 if none)."""
    fit = max(0, (free_words - cols) // _wstride(cols, bank_words) + 1)        # slots whose words fit
    return total if fit >= total else max(0, fit - 2)


def conv_regions(cfg: HwConfig, nw: int, s_out: int, ni: int, slot: int, aligned: bool, skip: bool = False,
                 pooled: int = 0, wbatch: int = 1, split: bool = False, lists: bool = True):
    """``_conv_regions`` with a fused Add's tables on a bank of their own when they fit there
    (``own_bank``), else beside the output slots."""
    if split and skip and aligned:
        out = _conv_regions(cfg, nw, s_out, ni, slot, aligned, skip, pooled, wbatch, split, lists, True)
        if out is not None:
            return out
    return _conv_regions(cfg, nw, s_out, ni, slot, aligned, skip, pooled, wbatch, split, lists, False)


def _conv_regions(cfg: HwConfig, nw: int, s_out: int, ni: int, slot: int, aligned: bool, skip: bool,
                  pooled: int, wbatch: int, split: bool, lists: bool, own_bank: bool):
    """Region bases, or None if they do not fit. aligned: weights, (tables + outputs) and each
    input slot start on their own bank, so the DMA filling one never waits for a MATMUL reading
    another (the MXU holds every bank of its input window for M cycles). skip: ``SKIP_SLOTS``
    slots "s" of an output slot's size after the outputs (a fused residual Add's skip tiles).
    pooled > 0 (a fused pool, ops/conv_pool.py): two slots "q" of ``requant_planes * pooled``
    words (a tile's pooled outputs) after the outputs. wbatch > 1: the last ``2 * wbatch`` weight
    slots are the streaming ring's two halves, each starting a bank, so the DMA filling one half
    never waits for the LOAD_WEIGHTS reading the other (``ConvTiling.wbatch``). split (with
    skip): the output and skip slots in two parity groups, the second from a bank's start
    (output slot g with skip slots g and g + 2: ``ops/conv_add.py``'s ring of these slots
    alternates between the groups, so chunk j's LOAD, REQUANT_ADD and STORE touch only group
    j % 2), so the STORE of one chunk never waits for the VPU working on the next
    (``_split_out_regions``). ``lists`` False: each region's slot bases a range or tuple, not a
    list (``_Alloc``; cheaper: enough to tell whether they fit and where they start).
    ``own_bank``: the tables after the input slots, from a bank's start (a REQUANT_ADD holds its
    table's bank for its whole transaction)."""
    a = _Alloc(cfg, lists=lists)
    bw, C, mp = a.bank_words, cfg.array_cols, cfg.requant_planes
    if wbatch > 1:      # the last 2 * wbatch slots: two halves of the ring, each from a bank's start
        a.take("w", nw - 2 * wbatch, C, bank_align=2 * C > bw)
        ws = list(a.regions["w"])
        for _ in range(2):
            a.top = round_up(a.top, bw)
            a.take("h", wbatch, C, bank_align=2 * C > bw)
            ws += a.regions.pop("h")
        a.regions["w"] = ws
    else:
        a.take("w", nw, C, bank_align=2 * C > bw)
    if aligned:
        a.top = round_up(a.top, bw)
    if not own_bank:
        a.take("p", 2, table_slot_words(cfg))
    if split:
        _split_out_regions(a, mp * s_out, SKIP_SLOTS if skip else 0)
    else:
        a.take("o", 2, mp * s_out)
    if skip and not split:
        a.take("s", SKIP_SLOTS, mp * s_out)
    if pooled:
        a.take("q", 2, mp * pooled)
    slots = []
    for _ in range(ni):
        if aligned:
            a.top = round_up(a.top, bw)
        slots.append(a.top)
        a.top += slot
    a.regions["i"] = slots
    if own_bank:
        # a REQUANT_ADD holds its table's bank for its whole transaction: a table bank shared
        # with the other parity group's slots would make that group's LOADs and STOREs wait
        a.top = round_up(a.top, bw)
        a.take("p", 2, table_slot_words(cfg))
    return a.regions if a.top <= a.sram_words else None


def _split_out_regions(a: _Alloc, words: int, skip_slots: int) -> None:
    """``conv_regions``' output slots "o" and ``skip_slots`` skip slots "s" (``words`` each) in
    two parity groups, the second from a bank's start: group g holds "o" slot g and "s" slots
    g, g + 2, ..."""
    groups = []
    for g in range(2):
        if g:
            a.top = round_up(a.top, a.bank_words)
        a.take("g", 1 + skip_slots // 2, words)
        groups.append(a.regions.pop("g"))
    a.regions["o"] = [grp[0] for grp in groups]
    if skip_slots:
        a.regions["s"] = [groups[j % 2][1 + j // 2] for j in range(skip_slots)]


#: tokens below the token limit a conv group leaves for other pairs in flight at its boundaries
TOKEN_MARGIN = 4


def max_cout_blocks_per_group(cfg: HwConfig) -> int:
    """Most cout blocks one accumulator group may hold: every block's last MATMUL signals the VPU
    once and the group's REQUANTs only follow all its MATMULs, so nbg MXU->VPU tokens are
    outstanding at once; they must stay under the token limit (a wide FC layer, M = 1, could
    otherwise put 251+ blocks in one group: ``emit.Program.token_limit``)."""
    return TOKEN_MAX - cfg.queue_depth - 1 - TOKEN_MARGIN


def acc_serial_share(M, nbg, acc_depth: int, mg: int):
    """Share of a conv group's VPU work (REQUANTs, a fused Add's ADDs) the MXU waits for (int64
    arrays or ints ``M`` rows a block, ``nbg`` blocks a group; float64 or float): the next group's
    MATMULs overwrite the accumulator rows those read (``ops/conv.py`` ``_emit``). 0 where two
    groups fit (``2 * nbg * M <= acc_depth``: groups alternate between the halves, a group's
    REQUANTs overlap the next one's MATMULs); a one-block group (``nbg <= mg``) alternately at
    the bottom and the top shares the rows both use, ``(2 * nbg * M - depth) / (nbg * M)``; a
    group of several blocks stays at the bottom and shares all of them (1). ``_group_refine``
    weighs it (``_serial_cycles``): medium ResNet-50's 1x1 convs with a fused Add at 28x28, 4
    blocks of 196 rows a group, took 111 k cycles where max(LOAD, MXU, VPU) said 59.7 k (a group's
    ADDs and STOREs, ~3.2 k cycles, before the next group's MATMULs, 4.2 k, 16 groups)."""
    rows = M * nbg
    part = np.clip((2 * rows - acc_depth) / np.maximum(rows, 1), 0.0, 1.0)
    return np.where(2 * rows <= acc_depth, 0.0, np.where(nbg <= mg, part, 1.0))


def _serial_cycles(mxu: int, vpu: int, M: int, nbg: int, acc_depth: int, mg: int, groups: int) -> float:
    """What the tiler adds to max(MXU, VPU) when it weighs the cout groups of a tile
    (``_group_refine``): of min(MXU, VPU) spread over the layer's ``groups`` (output tiles x
    cout groups) the share (``acc_serial_share`` of ``M`` rows a block, ``nbg`` blocks a group)
    of each group but the last, which the next group's MATMULs wait for (the last group's
    follows the layer's last MATMUL whatever the groups, and the next layer's first LOADs
    overlap it; counting it as well made medium ResNet-50 slower: 4,951,435 against 4,939,798
    cycles). Python ints in, a float out; the share in Python floats, the same IEEE double
    operations as ``acc_serial_share``'s arrays (so the same value: a test checks)."""
    rows = M * nbg
    if 2 * rows <= acc_depth:
        share = 0.0
    elif nbg <= mg:
        share = min(max((2 * rows - acc_depth) / max(rows, 1), 0.0), 1.0)
    else:
        share = 1.0
    return float(min(mxu, vpu)) * (share * (groups - 1)) / groups


class _ConvShapeTable(NamedTuple):
    """What ``conv_candidates`` shares across the bank and SRAM sizes: the (tw, th, nbg, kbg, ni)
    whose accumulator tile and token count fit, where no weight batch exists (the key's last
    field) but those no fuller cout group of which comes first (``_first_largest_groups``: they
    are never chosen) (``tile_conv``'s search order; then, if there is
    more than one spatial tile, the same candidates with weights resident: ``wres`` 1, their
    costs here still those of streaming every weight tile per output tile, ``conv_candidates``
    subtracts what the resident ones save; ``twin``: a streaming candidate's copy, else -1), as
    int64 arrays
    (``M`` and ``ntiles`` per (tw, th) pair, ``pair`` each candidate's pair, the rest per
    candidate: the tile, its input window, ``slot`` words of one input slot and ``ni * slot``,
    DDR bytes loaded, DMA instructions, MXU cycles, bytes the MXU waits for with one input slot)
    and the bandwidth-free cost terms as float64 (load bytes, DMA instructions, MXU, wait bytes: the rows of
    ``stacked``, one (4, n) array).
    With a fused pool, ``PTH`` x ``PTW`` (per pair) the pooled outputs of a tile, the conv tile
    (th x tw) the rows and columns they read; 0 without. ``pair_cycles`` per pair: a LOAD_WEIGHTS +
    MATMUL pair's cycles (``mxu_pair_cycles`` + 6); ``M_max`` the largest ``M`` (0 if none)."""
    M: np.ndarray
    ntiles: np.ndarray
    pair: np.ndarray
    th: np.ndarray
    tw: np.ndarray
    nbg: np.ndarray
    kbg: np.ndarray
    ni: np.ndarray
    ih: np.ndarray
    iw: np.ndarray
    slot: np.ndarray
    ni_slot: np.ndarray
    load_bytes: np.ndarray
    n_dma: np.ndarray
    mxu_cycles: np.ndarray
    wait_bytes: np.ndarray
    wres: np.ndarray
    twin: np.ndarray
    PTH: np.ndarray
    PTW: np.ndarray
    pair_cycles: np.ndarray
    terms: tuple
    stacked: np.ndarray
    M_max: int


def _first_largest_groups(nbg: np.ndarray) -> np.ndarray:
    """Per (pair, cout group) of a (pairs, cout groups) array of cout blocks per group (-1: not a
    candidate) whether it holds more than every earlier one of its pair, flattened in C order:
    the others can never be chosen, at any cin group and input slots. Candidates of one
    (tw, th) pair, kbg and ni need the same SRAM words, packed and bank-aligned, and the same MXU
    and VPU cycles, and one with at least as many cout blocks per group loads its windows no more
    often, so its load bytes, DMAs and wait bytes are no greater: its estimate is no greater at
    any price, bank and SRAM size, and the first of the least estimate wins. Not with weight
    batches: there a less full candidate whose LOAD bounds it gets one DMA per batch
    (``_batched_terms``) where the fuller one, not LOAD-bound, does not, and may cost less."""
    before = np.maximum.accumulate(nbg, axis=1)[:, :-1]
    return (nbg > np.concatenate((np.full_like(nbg[:, :1], -1), before), axis=1)).reshape(-1)


def _rows_as_terms(rows) -> tuple:
    """``_SearchSet``'s rows 0 to 5 (load bytes, DMA instructions, MXU, wait bytes, max(MXU, VPU),
    unaligned) in ``ConvCandidates.terms``' order (load bytes, DMAs, peak, MXU, unaligned, wait)."""
    return rows[0], rows[1], rows[4], rows[2], rows[5], rows[3]


class _SearchSet:
    """The streaming candidates that fit (``ConvCandidates.live``) that ``tile_conv`` still
    weighs at one weight batch ``gb`` (``weight_batch_tiles``): ``state`` = (their indices, int64
    ascending; their rows, a float64 array: 0 to 5 load bytes, DMA instructions, MXU, wait bytes,
    max(MXU, VPU), unaligned 0/1 (``ConvCandidates.live_rows``: the values of ``terms``); with
    batches (gb > 1) also 6 the DMA instructions batches save where their ring fits (else 0), 7
    those they save if it does, 8 a LOAD_WEIGHTS + MATMUL pair's cycles: ``_batched_terms``),
    one tuple so that a reader never sees one without the other. The estimate is nondecreasing
    in each term it weighs (IEEE divisions by a positive bandwidth, products by the positive
    cycles per DMA, by the overlap share, by 0.3 and by 0 / 1, sums, max and min of
    non-negative values are monotone), and batches only lower a candidate's DMA term, by at
    most row 6: so a later candidate no lower than an earlier one in rows 0 to 5 and whose DMA
    term less row 6 is no lower than the earlier one's DMA term never is the first of the
    least estimate, whatever the price; ``pick`` drops those after a chosen one (a sweep weighs
    one key at several DDR timings and clocks), before its next search (most sets are searched
    once: the drop is only worked out when a search follows). ``anchors``: the chosen ones;
    ``pending``: those of them whose drop is still to do."""

    __slots__ = ("state", "anchors", "pending")

    def __init__(self, live: np.ndarray, rows: np.ndarray) -> None:
        self.state = (live, rows)
        self.anchors: set = set()
        self.pending: list = []

    def pick(self, est, anchor: bool = True) -> list:
        """Per price (candidate, its estimate): the first of the least ``est(rows)``, a (prices,
        candidates) array, a price a row (per element the same IEEE operations as one price at
        a time: the same values); with ``anchor`` the later candidates the first price's pick
        dominates (the class docstring) are dropped before the next search."""
        if self.pending:
            self._drop()
        idx, rows = self.state
        e = est(rows)
        out = [(int(idx[k]), float(e[p, k])) for p, k in enumerate(e.argmin(axis=1).tolist())]
        i = out[0][0]
        if anchor and i not in self.anchors:
            self.anchors.add(i)
            self.pending.append(i)
        return out

    def _drop(self) -> None:
        """Drops the candidates the ``pending`` anchors dominate (the class docstring)."""
        pending, self.pending = self.pending, []
        idx, rows = self.state
        for i in pending:
            k = int(idx.searchsorted(i))
            worse = (rows[:6, k + 1:] >= rows[:6, k:k + 1]).all(axis=0)     # rows 0 to 5, at once
            if len(rows) > 6:           # the least DMA term batches may leave
                worse &= rows[1, k + 1:] - rows[6, k + 1:] >= rows[1, k]
            if worse.any():
                keep = np.empty(len(idx), bool)
                keep[:k + 1] = True
                np.logical_not(worse, out=keep[k + 1:])
                idx, rows = idx.compress(keep), rows.compress(keep, axis=1)
        self.state = (idx, rows)


class ConvCandidates(NamedTuple):
    """The conv tilings ``tile_conv`` weighs: the candidates of ``table`` (``_ConvShapeTable``,
    in its search order). Arrays over the ``nstream`` streaming candidates (the table's first;
    they hold no weights resident): per (tw, th) pair ``s_out`` and ``vpu`` (VPU cycles), per
    streaming candidate ``aligned`` (its slots fit on their own banks) and the cost terms
    (float64: load bytes, DMA instructions, max(MXU, VPU) (inf where the candidate does not fit the
    SRAM), MXU, unaligned 0/1, wait bytes), both worked out when asked for from ``bank`` (the
    ``_ConvBankTable``); a candidate's VPU cycles on the MXU's path (``serial_at``, ``serial_of``:
    ``_serial_cycles``) are worked out for the candidates asked for alone (stored in
    ``bank.serial``). ``live``: the
    streaming candidates that fit (int64, ascending),
    ``live_rows`` their cost terms (``_SearchSet``'s rows; ``live_terms`` in ``terms``' order),
    ``searches`` per weight batch those of them ``tile_conv`` still weighs (``_SearchSet``; under
    ``("rows", gb)`` the live candidates' rows at weight batch gb > 1 (the ``_SearchSet``'s first,
    with ``_batch_rows``), ``_group_refine``'s; under ``("refine", i, gb)`` the candidates ``_group_refine`` weighs for
    pick ``i`` and their rows, ``_refine_set``; under ``("fits", gb)`` where the ring of weight batch gb
    fits, ``_batch_fits``; the searches' results are shared by the bank and SRAM sizes of one
    ``_ConvOutTable``: ``bank.refined``, ``_shared_search_key``). A weights-resident
    candidate (index >= ``nstream``: ``table.twin`` of a streaming one) is worked out alone when
    asked for (``resident``: ``nres`` resident weight tiles (``resident_tiles``; 0 if none fit),
    ``aligned``, DDR bytes loaded and cost terms as Python floats); ``pogrp`` per pair the
    words of the tables and outputs rounded to banks, ``rest`` per pair those words unrounded,
    ``key`` the ``conv_candidates_key``, ``resident_memo`` the resident candidates worked out,
    ``choice_memo`` (candidate, the weight batch ``_batch_pays`` decides) -> ``_conv_choice``,
    ``pays_memo`` candidate -> what ``_batch_pays`` weighs of it at any price (``_pays_terms``),
    ``twin_memo`` streaming candidate -> what ``_picked`` weighs of its twin at any price
    (``_twin_terms``)."""
    table: _ConvShapeTable
    nstream: int
    s_out: np.ndarray
    vpu: np.ndarray
    bank: _ConvBankTable
    live: np.ndarray
    live_rows: np.ndarray
    searches: dict
    rest: np.ndarray
    pogrp: np.ndarray
    key: tuple
    resident_memo: dict
    choice_memo: dict
    pays_memo: dict
    twin_memo: dict

    @property
    def aligned(self) -> np.ndarray:
        """Per streaming candidate: its slots fit on their own banks."""
        return self.bank.aligned_words <= self.key[13]

    @property
    def terms(self) -> tuple:
        """The streaming candidates' cost terms (the class docstring)."""
        b, n0 = self.bank, self.nstream
        load_b, dma, mxu, wait_b = (a[:n0] for a in self.table.terms)
        peak = np.where(b.packed_words <= self.key[13], b.peak, np.inf)
        return load_b, dma, peak, mxu, (~self.aligned).astype(np.float64), wait_b

    @property
    def live_terms(self) -> tuple:
        """The live candidates' cost terms in ``terms``' order (rows of ``live_rows``)."""
        return _rows_as_terms(self.live_rows)

    def nres(self, i: int) -> int:
        """Resident weight tiles of candidate ``i`` (0: a streaming one)."""
        return 0 if i < self.nstream else self.resident(i)[0]

    def aligned_at(self, i: int) -> bool:
        """Candidate ``i``'s slots fit on their own banks."""
        return bool(self.bank.aligned_words[i] <= self.key[13]) if i < self.nstream else self.resident(i)[1]

    def load_bytes(self, i: int) -> int:
        """DDR bytes candidate ``i`` loads."""
        return int(self.table.load_bytes[i]) if i < self.nstream else self.resident(i)[2]

    def est_one(self, bw: float, i: int, dma_cycles: float = DMA_INSTR_CYCLES, overlap: float = 0.0,
                serial: bool = False) -> float:
        """``est_cycles`` of candidate ``i`` alone, in Python floats (the same IEEE double
        operations in the same order, so the same value); ``serial``: its peak plus
        ``serial_at(i)`` (as ``_group_refine`` weighs it)."""
        load_b, dma, peak, mxu, unaligned, wait_b = self.terms_at(i)
        if serial:
            peak += self.serial_at(i)
        return _est_floats((load_b, dma, peak, mxu, unaligned, wait_b), bw, dma_cycles, overlap)

    def serial_at(self, i: int) -> float:
        """Candidate ``i``'s VPU cycles on the MXU's path (``_serial_cycles``; stored in
        ``bank.serial``, shared by the bank and SRAM sizes of its ``_ConvOutTable``)."""
        out = self.bank.serial.get(i)
        if out is None:
            out = self._new_serial([i])[0]
        return out

    def serial_of(self, idx: np.ndarray) -> np.ndarray:
        """``serial_at`` of the candidates ``idx`` (int64 array; float64), worked out for those
        alone (a few: ``_group_refine``'s, one tile's) if not stored yet."""
        memo, ks = self.bank.serial, idx.tolist()
        todo = [k for k in ks if k not in memo]
        if todo:
            self._new_serial(todo)
        return np.array([memo[k] for k in ks], np.float64)

    def _new_serial(self, idx: list) -> list:
        """``serial_at`` of the candidates ``idx`` (a list), worked out and stored."""
        t, key = self.table, self.key
        acc_depth, mg, NB, M, vpu, ntiles = key[14], key[10], key[3], t.M, self.vpu, t.ntiles
        out = [_serial_cycles(mxu, int(vpu[p]), int(M[p]), nbg, acc_depth, mg, int(ntiles[p]) * -(-NB // nbg))
               for p, nbg, mxu in zip(t.pair.take(idx).tolist(), t.nbg.take(idx).tolist(), t.mxu_cycles.take(idx).tolist())]
        self.bank.serial.update(zip(idx, out))
        return out

    def terms_at(self, i: int) -> tuple:
        """Candidate ``i``'s cost terms (Python floats, the values ``terms`` holds)."""
        if i < self.nstream:        # ``terms``' values at i, without working out the whole arrays
            b, sram_words = self.bank, self.key[13]
            load_b, dma, mxu, wait_b = self.table.stacked[:, i].tolist()
            peak = float(b.peak[i]) if b.packed_words[i] <= sram_words else math.inf
            return load_b, dma, peak, mxu, 0.0 if b.aligned_words[i] <= sram_words else 1.0, wait_b
        return self.resident(i)[3]

    def resident(self, j: int) -> tuple:
        """(nres, aligned, load bytes, cost terms as Python floats) of the weights-resident
        candidate ``j``: as many resident weight tiles as fit next to its tables, outputs and
        input slots and a streaming ring of two slots (none needed if all are resident); it fits
        only if some are resident."""
        out = self.resident_memo.get(j)
        if out is None:
            t, key = self.table, self.key
            (kh, kw), KB, NB, R, C, wcols = key[0], key[2], key[3], key[6], key[7], key[18]
            bwd, sram_words = self.key[12], self.key[13]
            p, total = int(t.pair[j]), KB * NB * kh * kw
            rest = int(self.rest[p]) + int(t.ni_slot[j])
            nres = resident_tiles(total, C, bwd, sram_words - rest)
            wwords = weight_region_words(nres + (0 if nres == total else 2), C, bwd)
            fit = wwords + rest <= sram_words and nres > 0
            aligned = bool(round_up(wwords, bwd) + int(self.pogrp[p]) + int(t.ni[j]) * round_up(int(t.slot[j]), bwd)
                           <= sram_words)
            saved = nres * (int(t.ntiles[p]) - 1)                    # weight tile loads saved
            load_bytes = int(t.load_bytes[j]) - saved * wcols * R // NB     # (the N tiles' mean)
            peak = float(max(int(t.mxu_cycles[j]), int(self.vpu[p]))) if fit else math.inf
            _, _, mxu, wait_b = t.stacked[:, j].tolist()
            terms = (float(load_bytes), float(int(t.n_dma[j]) - saved), peak, mxu, 0.0 if aligned else 1.0, wait_b)
            out = self.resident_memo[j] = (nres, aligned, load_bytes, terms)
        return out

    def est_cycles(self, bw: float, terms: tuple | None = None, dma_cycles: float = DMA_INSTR_CYCLES,
                   overlap: float = 0.0, load_t: np.ndarray | None = None) -> np.ndarray:
        """Estimated cycles of each candidate at ``bw`` LOAD bytes per core cycle (float64, the
        module docstring's rough model: the busiest of LOAD, MXU and VPU, plus 0.3 x the lesser
        of LOAD and MXU when the slots do not sit on their own banks, plus the window loads one
        input slot exposes; each term added as 0.0 where it does not apply; inf where the
        candidate does not fit the SRAM; ``overlap`` x the lesser of LOAD and MXU more: the part
        of the shorter engine's work that does not hide under the longer one's,
        ``conv_dma_price``). ``terms``: those of some candidates, a tuple or the rows of an
        array (default all: ``self.terms``); each candidate's value is the same whichever
        others are weighed. ``load_t``: the load bytes over ``bw`` if already worked out (a new
        array, overwritten)."""
        load_b, dma, peak, mxu, unaligned, wait_b = self.terms if terms is None else terms
        if load_t is None:
            load_t = load_b / bw
        load_t += dma * dma_cycles
        est = np.maximum(load_t, peak)
        t = np.minimum(load_t, mxu, out=load_t)        # in place (the same roundings, fewer arrays)
        if overlap:
            est += overlap * t
        t *= 0.3
        t *= unaligned
        est += t
        est += np.divide(wait_b, bw, out=t)
        return est


def _est_floats(terms: tuple, bw: float, dma_cycles: float, overlap: float) -> float:
    """``ConvCandidates.est_cycles`` of one candidate's cost terms (Python floats, ``terms``'
    order), in the same IEEE double operations in the same order (so the same value)."""
    load_b, dma, peak, mxu, unaligned, wait_b = terms
    load_t = load_b / bw + dma * dma_cycles
    est = max(load_t, peak)
    if overlap:
        est += overlap * min(load_t, mxu)
    return est + min(load_t, mxu) * 0.3 * unaligned + wait_b / bw


def conv_candidates_key(kernel, strides, cin: int, cout: int, oh: int, ow: int, cfg: HwConfig,
                        skip: bool = False, pool: tuple | None = None) -> tuple:
    """Everything ``conv_candidates`` depends on: the layer's kernel, strides, input and output
    channel blocks (``ceil(cin / R)``, ``out_tiles``), output size, and the configuration's array
    (rows, cols), pixels per DDR granule, table words, lane groups, requant planes, bank and
    SRAM words, accumulator depth, cout blocks per group (not its DDR timing or clocks), and
    ``skip``: a fused residual Add loads a skip tile per output chunk (``ops/conv_add.py``);
    ``pool``: a fused pool's (kernel, strides, pads, output (PH, PW)) (``ops/conv_pool.py``); the
    weight words one (cin block, tap) loads over all N tiles (``min(cout, NB * C)``: a tile's
    columns past ``cout`` are not loaded, ``conv.weight_cols``); whether no weight batch exists
    (``weight_batch_tiles`` 1: the search may drop candidates for good, ``_first_largest_groups``,
    ``_SearchSet``)."""
    R, C, NB = cfg.array_rows, cfg.array_cols, out_tiles(cout, cfg)
    return (tuple(kernel), tuple(strides), ceil_div(cin, R), NB, oh, ow, R, C, align_px(cfg), cfg.param_words,
            cfg.lane_groups, cfg.requant_planes, cfg.bank_words, cfg.sram_words, cfg.acc_depth_rows,
            max_cout_blocks_per_group(cfg), bool(skip), pool, min(cout, NB * C), weight_batch_tiles(cfg) == 1)


def _product(*axes: np.ndarray) -> list:
    """The cartesian product of 1-D arrays, first axis outermost (C order), one flat array each."""
    grids = np.meshgrid(*axes, indexing="ij")
    return [g.reshape(-1) for g in grids]


@lru_cache(maxsize=512)         # about 20 arrays of 300 to 8,000 candidates
def _conv_shape_table(skey: tuple) -> _ConvShapeTable:
    """The part of ``conv_candidates`` that does not read the bank or SRAM size: ``skey`` is
    ``conv_candidates_key`` without them. Cached (read-only arrays)."""
    (kh, kw), (sh, sw), KB, NB, oh, ow, R, C, ap, pw, mg, mp, acc_depth, max_nbg, skip, pool, wcols, no_batch = skey
    W, T = R, kh * kw
    # the (tw, th) pairs whose tile fits the accumulator, and what does not depend on the rest
    if pool is None:
        tw_c, th_c = np.array(_cands(ow, ap), np.int64), np.array(_cands(oh), np.int64)
    else:       # pooled tiles (ptw, pth) and the conv tiles they read (at most the whole output)
        (pkh, pkw), (psh, psw), _, (ph, pw_) = pool
        ptw_c, pth_c = np.array(_cands(pw_, ap), np.int64), np.array(_cands(ph), np.int64)
    if pool is not None:
        ptw, pth = np.repeat(ptw_c, len(pth_c)), np.tile(pth_c, len(ptw_c))
        tw, th = np.minimum(ow, (ptw - 1) * psw + pkw), np.minimum(oh, (pth - 1) * psh + pkh)
    else:
        tw, th = np.repeat(tw_c, len(th_c)), np.tile(th_c, len(tw_c))
    keep = tw * th <= acc_depth
    tw, th = tw[keep], th[keep]
    M, ih, iw = tw * th, window_rows(th, kh, sh), (tw - 1) * sw + kw + (ap - 1)
    if pool is None:
        ntiles, pth, ptw = -(-oh // th) * -(-ow // tw), np.zeros(len(M), np.int64), np.zeros(len(M), np.int64)
    else:
        ptw, pth = ptw[keep], pth[keep]
        ntiles = -(-ph // pth) * -(-pw_ // ptw)
    # x (nbg, kbg, ni), in the loops' order (C order of np.indices), filtered. nbg: the
    # halvings of NB, then (one tile over a one-row output only) every other ceil(NB / groups)
    # (``nbg_cands``). What filters reads only the pair and nbg: filtered per (pair, nbg), then
    # each kept one x (kbg, ni)
    nbs = [n for n in nbg_cands(NB) if n <= max_nbg and n % mg == 0]
    pows = set(_pow_cands(NB))
    halving = np.array([n in pows for n in nbs], bool)
    nbs, kbs = np.array(nbs, np.int64), np.array(_pow_cands(KB), np.int64)
    i, b = np.indices((len(M), len(nbs))).reshape(2, -1)
    nbg = nbs.take(b)
    keep = (M.take(i) * nbg <= acc_depth) & (((ntiles.take(i) == 1) & (oh == 1)) | halving.take(b))
    # of those, only the ones that may be chosen where no weight batch exists (``_first_largest_groups``)
    if no_batch:      # (per share of the VPU work on the MXU's path: a fuller group may have more)
        share = acc_serial_share(M.take(i), nbg, acc_depth, mg)
        shape = (len(M), len(nbs))
        keep = np.logical_or.reduce([_first_largest_groups(np.where(keep & (share == v), nbg, -1).reshape(shape))
                                     for v in np.unique(share[keep])] or [np.zeros(keep.size, bool)])
    inner = 2 * len(kbs)
    i, nbg = np.repeat(i[keep], inner), np.repeat(nbg[keep], inner)
    kbg, ni = np.tile(np.repeat(kbs, 2), len(i) // inner), np.tile(np.array([2, 1], np.int64), len(i) // 2)
    wres = np.zeros(len(i), np.int64)
    multi = ntiles.take(i) > 1                        # the weights-resident copies (module docstring)
    n0 = len(i)
    twin = np.where(multi, n0 + np.cumsum(multi) - 1, -1)       # each streaming candidate's copy
    i, nbg, kbg, ni, wres = (np.concatenate([a, a[multi]]) for a in (i, nbg, kbg, ni, wres))
    wres[n0:] = 1
    twin = np.concatenate([twin, np.full(len(i) - n0, -1, np.int64)])
    slot = kbg * (ih * iw).take(i)
    nkg = -(-KB // kbg)
    windows = ntiles.take(i) * np.where(nkg == 1, 1, -(-NB // nbg))      # input windows loaded
    oblocks = -(-NB * mp // mg)                                     # output channel blocks
    load_bytes = (windows * (KB * ih * ((tw - 1) * sw + kw) * W).take(i)
                  + (ntiles * (KB * T * wcols * W + NB * pw * W + skip * oblocks * M * W)).take(i))
    n_dma = windows * nkg + (ntiles * (NB * KB * T + NB + skip * oblocks)).take(i)
    pair_cycles = mxu_pair_cycles(M, R, C) + 6
    mxu = (ntiles * (NB * KB * T) * pair_cycles).take(i)
    wait = np.where(ni == 1, windows * (KB * ih * iw * W).take(i), 0)
    stacked = np.empty((4, len(i)))
    for r, a in enumerate((load_bytes, n_dma, mxu, wait)):
        stacked[r] = a
    stacked.flags.writeable = False
    out = _ConvShapeTable(M, ntiles, i, th.take(i), tw.take(i), nbg, kbg, ni, ih.take(i), iw.take(i), slot, ni * slot, load_bytes,
                          n_dma, mxu, wait, wres, twin, pth, ptw, pair_cycles,
                          tuple(stacked), stacked, int(M.max(initial=0)))
    for a in (*out[:-3], *out.terms, out.stacked):
        a.flags.writeable = False
    return out


class _ConvOutTable(NamedTuple):
    """What ``_conv_bank_table`` reads of the bank size only through the output slots' chunk
    (``s_out``), shared by the bank sizes that give the same chunks, over the ``nstream``
    streaming candidates of ``table`` (its first): per (tw, th) pair ``s_out``, ``vpu`` (VPU
    cycles) and ``fixed`` (words of the tables and output (skip, pooled) slots); per streaming
    candidate the SRAM words it needs packed (``packed_words``) and ``peak`` (max(MXU, VPU),
    float64). ``refined``: the searches' results of the ``ConvCandidates`` of this table, shared
    by their bank and SRAM sizes (``_shared_search_key`` -> ``_group_refine``'s result);
    ``serial``: candidate (any of ``table``) -> its ``ConvCandidates.serial_at`` cycles, which
    read only ``table``, its key and ``vpu`` (worked out when asked for, shared likewise)."""
    table: _ConvShapeTable
    nstream: int
    s_out: np.ndarray
    vpu: np.ndarray
    fixed: np.ndarray
    packed_words: np.ndarray
    peak: np.ndarray
    refined: dict
    serial: dict


@lru_cache(maxsize=512)
def _conv_out_table(okey: tuple) -> _ConvOutTable:
    """``_ConvOutTable`` of ``okey``: the ``_conv_shape_table`` key and the output slots' chunk
    cap (``_out_slot_cap``, >= 1, clipped to the largest tile ``M_max``: the bank sizes whose cap
    caps no tile share one table; None with a fused pool, whose output slot holds the whole
    tile). Cached (read-only arrays)."""
    skey, cap = okey[:-1], okey[-1]
    (kh, kw), (sh, sw), KB, NB, oh, ow, R, C, ap, pw, mg, mp, acc_depth, max_nbg, skip, pool, wcols, _ = skey
    t = _conv_shape_table(skey)
    n0 = int(t.wres.searchsorted(1))                               # the streaming candidates come first
    PM = t.PTH * t.PTW
    # a fused pool requantizes the whole tile into one output slot, pools it into a pooled slot
    s_out = t.M if cap is None else np.minimum(t.M, cap)
    fixed = 2 * mg * pw + (2 + SKIP_SLOTS * skip) * mp * s_out + 2 * mp * PM    # tables, output (skip, pooled) slots
    pair = t.pair[:n0]
    # (per pair sums taken per candidate: the same integers as the per-candidate sums)
    packed = (fixed + 2 * C).take(pair) + t.ni_slot[:n0]            # streaming: two weight slots of C words
    taps = pool[0][0] * pool[0][1] + 1 if pool else 0
    # per N tile and output word: REQUANT's write; a fused residual Add's REQUANT_ADD also reads the skip word
    vpu = t.ntiles * NB * ((1 + skip) * mp * t.M + pw * -(-t.M // s_out) + taps * mp * PM)
    peak = np.maximum(t.stacked[2, :n0], vpu.astype(np.float64).take(pair))      # (float64 MXU: ``stacked`` row 2)
    out = _ConvOutTable(t, n0, s_out, vpu, fixed, packed, peak, {}, {})
    for a in out[2:-2]:
        a.flags.writeable = False
    return out


class _ConvBankTable(NamedTuple):
    """What ``conv_candidates`` shares across the SRAM sizes (the bank size fixed), over the
    ``nstream`` streaming candidates of ``table`` (its first): those of ``_ConvOutTable`` (the
    same arrays, and its ``refined`` and ``serial`` dicts) and per (tw, th) pair ``pogrp`` (``fixed`` rounded to
    banks), per streaming candidate the SRAM words it needs bank-aligned (``aligned_words``)."""
    table: _ConvShapeTable
    nstream: int
    s_out: np.ndarray
    vpu: np.ndarray
    fixed: np.ndarray
    pogrp: np.ndarray
    packed_words: np.ndarray
    aligned_words: np.ndarray
    peak: np.ndarray
    refined: dict
    serial: dict


def _round_up_words(words: np.ndarray, bwd: int) -> np.ndarray:
    """``words`` (non-negative int64) rounded up to a multiple of ``bwd``, by a mask where ``bwd``
    is a power of two (the same integers, without the slower integer division)."""
    if bwd & (bwd - 1) == 0:
        return (words + (bwd - 1)) & -bwd
    return round_up(words, bwd)


@lru_cache(maxsize=512)
def _conv_bank_table(bkey: tuple) -> _ConvBankTable:
    """The part of ``conv_candidates`` that does not read the SRAM size: ``bkey`` is
    ``conv_candidates_key`` without it (the rest from the ``_conv_out_table`` of its chunk
    cap). Cached (read-only arrays)."""
    ap, pw, mg, mp, bwd, pool = bkey[8], bkey[9], bkey[10], bkey[11], bkey[12], bkey[16]
    skey = bkey[:12] + bkey[13:]
    t = _conv_shape_table(skey)
    cap = None if pool else min(_out_slot_cap(ap, bwd, mg * pw, mp), t.M_max)
    o = _conv_out_table(skey + (cap,))
    n0, C = o.nstream, bkey[7]
    pogrp = _round_up_words(o.fixed, bwd)
    aligned = ((pogrp + round_up(weight_region_words(2, C, bwd), bwd)).take(t.pair[:n0])
               + t.ni[:n0] * _round_up_words(t.slot[:n0], bwd))
    for a in (pogrp, aligned):
        a.flags.writeable = False
    return _ConvBankTable(t, n0, o.s_out, o.vpu, o.fixed, pogrp, o.packed_words, aligned, o.peak, o.refined, o.serial)


@lru_cache(maxsize=256)
def conv_candidates(key: tuple) -> ConvCandidates:
    """The candidates of the conv tiling search for ``key`` (``conv_candidates_key``): every
    (tw, th, nbg, kbg, ni) whose accumulator tile, token count, lane groups and packed SRAM
    regions fit, with its costs (``ConvCandidates``: the shared ``_conv_shape_table``, what the
    output slots' chunk adds (``_conv_out_table``, shared by the bank sizes of one chunk), what
    the bank size adds (``_conv_bank_table``) and the SRAM size: for the streaming candidates as
    arrays, a weights-resident one when asked for). Cached (read-only arrays)."""
    sram_words = key[13]
    b = _conv_bank_table(key[:13] + key[14:])
    t = b.table
    fits = b.packed_words <= sram_words
    live = np.flatnonzero(fits)
    terms = np.empty((6, len(live)))        # the live candidates' cost terms (``_SearchSet``'s rows)
    if len(live) == len(fits):              # all fit: the first nstream columns
        terms[:4] = t.stacked[:, :len(live)]
        terms[4] = b.peak
        np.greater(b.aligned_words, sram_words, out=terms[5])
    else:
        np.take(t.stacked, live, axis=1, out=terms[:4], mode="clip")      # (valid indices: clip, not buffered)
        np.take(b.peak, live, out=terms[4])
        np.greater(np.take(b.aligned_words, live), sram_words, out=terms[5])
    live.flags.writeable = False
    terms.flags.writeable = False
    return ConvCandidates(t, b.nstream, b.s_out, b.vpu, b, live, terms, {}, b.fixed, b.pogrp, key, {}, {}, {}, {})


def tile_conv(node: str, kernel, strides, cin: int, cout: int, oh: int, ow: int, cfg: HwConfig,
              skip: bool = False, pool: tuple | None = None, price: tuple | None = None) -> ConvTiling:
    """The cheapest conv tiling (module docstring): of ``conv_candidates`` that stream their
    weights, the first with the least ``est_cycles`` at ``load_bw(cfg)``; then the same tile with
    weights resident if that fits on its own banks as well, keeps as many streaming weight slots
    (or needs none) and costs no more (the rough cost model misjudges other tile
    shapes, so residency only removes loads from the tile it would choose anyway; on 'medium'
    letting it pick other shapes cost 0.9 % on ResNet-50). Non-square arrays: NB = ``out_tiles``
    N tiles; a group holds whole output channel blocks (nbg a multiple of ``lane_groups``); output slots
    hold ``requant_planes`` words per accumulator row, table slots ``table_slot_words``.
    ``skip``: a fused residual Add's ``SKIP_SLOTS`` skip slots (``conv_regions``), loads and ADDs.
    ``pool``: a fused pool's (kernel, strides, pads, (PH, PW) output) (ops/conv_pool.py): the
    tiles are pool_th x pool_tw pooled outputs, each computing the th x tw conv outputs they
    read (overlapping windows recomputed), requantized into one output slot, pooled into one of
    two pooled slots "q".
    ``price``: (LOAD bytes per cycle, cycles per DMA) the candidates are weighed at, default
    ``conv_dma_price`` (``rough_dma_price`` with a fused pool).
    CompileError naming the node if no tiling fits the SRAM."""
    key = conv_candidates_key(kernel, strides, cin, cout, oh, ow, cfg, skip, pool)
    no_batch = key[19]                  # ``weight_batch_tiles`` 1 (``conv_dma_price``, ``_batch_key``)
    ahead = None
    if price is None:
        price, batch = conv_price(cfg, pool is not None, no_batch)
        ahead = _AHEAD.get("rough" if pool else "conv")
    else:
        if _AHEAD and price == rough_dma_price(cfg):        # (a fused pool's weighing, ``ops/pool.py``)
            ahead = _AHEAD.get("rough")
        batch = (1,) if no_batch else _batch_key(cfg)
    pick = _PICKS.get((key, price, batch))
    if pick is None:
        pick = _pick(node, key, price, batch, cfg, kernel, strides, cin, cout, oh, ow, pool, ahead)
    return conv_tiling(pick)


def conv_price(cfg: HwConfig, pool: bool, no_batch: bool) -> tuple:
    """(price, ``_batch_key``) ``tile_conv`` weighs a conv's candidates at by default: ``rough_dma_price``
    with a fused ``pool`` or where no weight batch exists (``no_batch``: ``conv_candidates_key``'s last
    field), else ``_dma_price``. Reads only the DMA, DDR timing and clock fields of ``cfg``."""
    price = rough_dma_price(cfg) if pool or no_batch else _dma_price(cfg)
    return price, (1,) if no_batch else _batch_key(cfg)


def known_pick(key: tuple, price: tuple, batch: tuple):
    """The pick ``tile_conv`` stored for (``conv_candidates_key``, price, ``_batch_key``)
    (``_PICKS``: (candidate, its estimate, resident weight tiles, ``_conv_choice``)), None if
    none is stored (not searched yet, dropped, or no tiling fits)."""
    return _PICKS.get((key, price, batch))


def conv_tiling(pick: tuple) -> ConvTiling:
    """The ConvTiling of a pick (``known_pick``): a new record (its own region lists and slot dict)."""
    i, est_i, nres, choice = pick
    th, tw, nbg, kbg, ni, nw, s_out, ih, iw, regions, load_bytes, aligned, slot_words, acc_halves, pth, ptw, gb = choice
    return ConvTiling(th, tw, nbg, kbg, ni, nw, s_out, ih, iw, {k: list(v) for k, v in regions.items()},
                      acc_halves, est_i, load_bytes, aligned, dict(slot_words), nres, pth, ptw, gb)


def _batch_key(cfg: HwConfig) -> tuple:
    """What of the DMA fields ``_conv_choice`` reads besides ``load_bw``: ``weight_batch_tiles``
    and, only where batches are possible (> 1), ``tile_dma_cycles``, which then decides them."""
    gb = weight_batch_tiles(cfg)
    return (gb, tile_dma_cycles(cfg)) if gb > 1 else (1,)


#: (conv_candidates_key, LOAD bytes per core cycle, ``_batch_key``) -> ``_pick``'s result (a fused pool's tiling is
#: weighed by the fusion hook, then tiled again for the fused op)
_PICKS: dict = {}
_PICKS_MAX = 1 << 14

#: the prices the configs about to be tiled weigh candidates at (``prices_ahead``): per kind ("conv":
#: ``conv_dma_price``, "rough": ``rough_dma_price``, a fused pool's) {(price, ``_batch_key``): None}
_AHEAD: dict = {}


class prices_ahead:
    """``with prices_ahead(cfgs):`` the conv tiler, at a table's first search at one of the
    prices of ``cfgs`` (HwConfigs), weighs the table at all of them at once (one numpy
    evaluation of (prices, candidates) instead of one per price: ``_SearchSet.pick``) and
    stores each pick in ``_PICKS``, where the later configs find it (``Estimator.estimate_many``
    runs a DDR timing sweep over one array, SRAM and accumulator in one). Each pick is the one
    the search at that price alone makes (the same values, the first of the least)."""

    def __init__(self, cfgs: list) -> None:
        self.ahead = {"conv": dict.fromkeys((conv_dma_price(c), _batch_key(c)) for c in cfgs),
                      "rough": dict.fromkeys((rough_dma_price(c), _batch_key(c)) for c in cfgs)}

    def __enter__(self) -> prices_ahead:
        self.saved = dict(_AHEAD)
        _AHEAD.clear()
        _AHEAD.update({k: v for k, v in self.ahead.items() if len(v) > 1})
        return self

    def __exit__(self, *exc) -> None:
        _AHEAD.clear()
        _AHEAD.update(self.saved)


def _pick(node: str, key: tuple, price: tuple, batch: tuple, cfg: HwConfig, kernel, strides, cin: int, cout: int,
          oh: int, ow: int, pool, ahead: dict | None = None) -> tuple:
    """``tile_conv``'s search: (candidate, its estimate, resident weight tiles, ``_conv_choice``),
    stored in ``_PICKS``; with ``ahead`` (``_AHEAD``'s prices of this kind) holding ``(price,
    batch)``, also the picks at its other prices of the same weight batch and overlap share not
    met yet, weighed at once after the first pick's drop (``_SearchSet.pick``: a price a row;
    ``_picked``).
    CompileError naming the conv ``node`` if no tiling fits."""
    c = conv_candidates(key)
    if len(c.live) == 0:                                # no streaming tile fits
        C, ap, mp, tsw = cfg.array_cols, align_px(cfg), cfg.requant_planes, table_slot_words(cfg)
        (kh, kw), (sh, sw) = kernel, strides
        raise CompileError(f"QConv {node!r} ({cin}->{cout}, kernel {kh}x{kw}, stride {sh}x{sw}, "
                           f"output {oh}x{ow}) cannot be tiled into the {cfg.sram_words}-word SRAM of "
                           f"config '{cfg.name}' (even a one-pixel tile needs {2 * C + 2 * tsw + 2 * mp + kh * (kw + ap - 1)} "
                           f"words: double-buffered weight tiles, requant tables, input window)"
                           + (f"; with the fused pool (window {pool[0][0]}x{pool[0][1]}) a tile needs at least "
                              f"{min(oh, pool[0][0]) * min(ow, pool[0][1])} conv outputs, accumulator "
                              f"{cfg.acc_depth_rows} rows" if pool else ""))
    # the first streaming candidate of the least estimate (only those that fit are weighed), at
    # ``price`` and the prices ahead of the same weight batch and overlap share not met yet
    gb, overlap = batch[0], price[2]
    todo = [(price, batch)]
    if ahead and (price, batch) in ahead:
        todo += [(p, b) for p, b in ahead if b[0] == gb and p[2] == overlap and (p, b) != (price, batch)
                 and (key, p, b) not in _PICKS]
    col, col_bytes = _price_columns(todo, gb)
    skey = _shared_search_key(c, gb, col_bytes, overlap)
    refined = c.bank.refined.get(skey)
    if refined is None:
        search = _search_set(c, gb)
        picks = search.pick(_price_est(c, gb, col[:, :1], overlap))        # drops what its pick dominates,
        if len(todo) > 1:                                                   # then the others on what is left
            picks += search.pick(_price_est(c, gb, col[:, 1:], overlap), anchor=False)
        refined = c.bank.refined[skey] = _group_refine(c, picks, gb, col, overlap)
    return _picked(node, key, c, refined, todo, cfg)


def _shared_search_key(c: ConvCandidates, gb: int, col_bytes: bytes, overlap: float) -> tuple:
    """What ``_pick``'s search and ``_group_refine`` read of ``c`` at weight batch ``gb``, the prices
    (``col_bytes``: the bytes of ``_price_columns``' array) and ``overlap`` besides ``c``'s
    ``_ConvOutTable`` (its shape table, output chunk, VPU cycles, peaks and packed words: the
    ``refined`` dict this keys is that table's): the live candidates (those whose packed words fit
    the SRAM: nested as the SRAM grows, so their count names them), their unaligned row (from the
    bank size's aligned words), with batches (gb > 1) where the ring fits (``_batch_fits``:
    ``_batch_rows``' other rows read the shape table and ``gb`` only), and the prices' bytes. Bank
    and SRAM sizes that give the same (across accumulator depths the tables differ) share the
    result: the same rows at the same prices, the same picks."""
    unaligned = np.packbits(c.live_rows[5] != 0).tobytes()
    fits = np.packbits(_batch_fits(c, gb)).tobytes() if gb > 1 else b""
    return len(c.live), unaligned, gb, fits, col_bytes, overlap


def _price_est(c: ConvCandidates, gb: int, col: np.ndarray, overlap: float):
    """``est(rows)`` of ``_SearchSet`` rows at weight batch ``gb`` at the prices of ``col``
    (``_price_columns``), a (prices, candidates) array."""
    bw, dma_cycles = col[0], col[1]
    if gb == 1:
        return lambda r: c.est_cycles(bw, _rows_as_terms(r), dma_cycles, overlap)

    def est(rows: np.ndarray) -> np.ndarray:
        terms, load_t = _batched_terms(rows, gb, c.key, (bw, dma_cycles), col[2])
        return c.est_cycles(bw, terms, dma_cycles, overlap, load_t)
    return est


#: (``todo`` pairs, weight batch) -> ``_price_columns``' result (a timing group's prices recur at each
#: of its tables' searches)
_COLUMNS: dict = {}


def _price_columns(todo: list, gb: int) -> tuple:
    """(The (price, ``_batch_key``) pairs of ``todo`` as a read-only float64 (2 or 3, prices, 1)
    array: LOAD bytes per cycle, cycles per DMA and, with weight batches (``gb`` > 1),
    ``tile_dma_cycles``: a price a row, broadcast against the candidates; its bytes), stored in
    ``_COLUMNS``."""
    memo = (tuple(todo), gb)
    out = _COLUMNS.get(memo)
    if out is None:
        col = np.array([[p[0], p[1]] + ([b[1]] if gb > 1 else []) for p, b in todo], np.float64).T[:, :, None]
        col.flags.writeable = False
        if len(_COLUMNS) >= _PICKS_MAX:
            _COLUMNS.clear()
        out = _COLUMNS[memo] = (col, col.tobytes())
    return out


def _picked(node: str, key: tuple, c: ConvCandidates, refined: list, todo: list, cfg: HwConfig) -> tuple:
    """``_pick``'s result from its search's refined picks (candidate, its estimate: the cout
    group ``_group_refine`` prefers) at the (price, ``_batch_key``) pairs of ``todo``: per pair
    that pick, then the same tile with weights resident where that is no worse;
    each stored in ``_PICKS``; the first pair's returned (CompileError naming the conv ``node`` if
    its regions do not fit; a later pair's pick whose regions do not fit is left to its own
    search, which names its node)."""
    out = None
    for (price, batch), (i, est_i) in zip(todo, refined):
        try:
            choice = _conv_choice(node, key, c, i, batch, cfg, price)
            twin = c.twin_memo.get(i, _UNSEEN)
            if twin is _UNSEEN:
                twin = _twin_terms(c, i)
            if twin is not None:
                j, terms = twin
                est_j = _est_floats(terms, *price)                  # ``est_one(serial=True)``
                if est_j <= est_i:
                    resident = _conv_choice(node, key, c, j, batch, cfg, price)
                    if resident[5] == 0 or resident[5] >= choice[5]:     # all resident, or as many streaming slots
                        i, est_i, choice = j, est_j, resident   # the same tile with weights resident: fewer loads, no fewer slots
        except CompileError:
            if out is None:
                raise
            continue
        if len(_PICKS) >= _PICKS_MAX:
            _PICKS.clear()
        got = _PICKS[(key, price, batch)] = (i, est_i, c.nres(i), choice)
        if out is None:
            out = got
    return out


def _group_refine(c: ConvCandidates, picks: list, gb: int, col: np.ndarray, overlap: float) -> list:
    """Per price (a row of ``col``, ``_price_columns``) its refined pick (candidate, its
    estimate): of the live streaming candidates of its search's pick's (``picks``: (candidate,
    its estimate) per price) tile (th x tw) that load no more DDR bytes than the pick, the first
    of the least ``est_cycles`` at the price (weight batches of ``gb`` as ``_pick`` weighs them)
    with each one's ``serial_at`` cycles added to its max(MXU, VPU): the cout group (and with it
    the cin group, input and weight slots) that lets a group's REQUANTs overlap the next group's
    MATMULs where that pays. The prices of one pick are weighed at once (a (prices, candidates)
    array: the same values). A pick whose ``serial_at`` is 0 stays, with its estimate, unweighed:
    it was the first of the least of every live candidate's estimate, which the serial cycles
    only raise (the estimate is nondecreasing in max(MXU, VPU); its own gains 0.0).
    Only the tile ``_pick`` chose, and no window read more often: the DMA price underrates loads, so weighing
    every tile took medium ResNet-50's LOAD-bound layers to tiles that load more (n86+n88
    124.7 k -> 151.3 k cycles), and every group of the tile took medium densenet121's 14x14 1x1
    convs to two cout groups, each reading the window again (8,862,665 -> 8,979,575 cycles)."""
    out = list(picks)
    for i in dict.fromkeys(i for i, _ in picks):
        if c.serial_at(i) == 0.0:
            continue
        sel = [p for p, (k, _) in enumerate(picks) if k == i]
        cols = col if len(sel) == len(picks) else col[:, sel]
        cands, rows = _refine_set(c, i, gb)
        e = _price_est(c, gb, cols, overlap)(rows)
        for r, (p, k) in enumerate(zip(sel, e.argmin(axis=1).tolist())):
            out[p] = (int(cands[k]), float(e[r, k]))
    return out


def _refine_set(c: ConvCandidates, i: int, gb: int) -> tuple:
    """The candidates ``_group_refine`` weighs for pick ``i`` at weight batch ``gb`` and their
    rows (``_SearchSet``'s, max(MXU, VPU) plus ``serial_at``), whatever the price (stored in
    ``c.searches``). A (tw, th) pair's streaming candidates are one run of the table (its
    search order), so its live ones are one run of ``c.live``."""
    got = c.searches.get(("refine", i, gb))
    if got is None:
        t, live, p = c.table, c.live, c.table.pair.item(i)
        lo, hi = live.searchsorted(t.pair[:c.nstream].searchsorted((p, p + 1))).tolist()    # (pair p's run)
        sel = lo + np.flatnonzero(c.live_rows[0, lo:hi] <= t.load_bytes.item(i))      # (row 0: load bytes)
        if gb > 1 and ("rows", gb) not in c.searches:
            _search_set(c, gb)
        cands, rows = live.take(sel), (c.searches[("rows", gb)] if gb > 1 else c.live_rows).take(sel, axis=1)
        rows[4] += c.serial_of(cands)
        rows.flags.writeable = False
        got = c.searches[("refine", i, gb)] = (cands, rows)
    return got


_UNSEEN = object()


def _twin_terms(c: ConvCandidates, i: int) -> tuple | None:
    """What ``_picked`` weighs of streaming candidate ``i``'s twin (the same tile with weights
    resident) whatever the price (stored in ``c.twin_memo``): (its index, its cost terms as
    Python floats) if it has one that holds some weights resident and whose slots sit on their
    own banks if ``i``'s do, else None. Its peak holds its ``serial_at`` cycles (as
    ``est_one(serial=True)`` weighs it)."""
    j = int(c.table.twin[i])
    out = None
    if j >= 0 and c.nres(j) > 0 and c.aligned_at(j) >= c.aligned_at(i):
        load_b, dma, peak, mxu, unaligned, wait_b = c.terms_at(j)
        peak += c.serial_at(j)
        out = (j, (load_b, dma, peak, mxu, unaligned, wait_b))
    c.twin_memo[i] = out
    return out


def _batch_pays(c: ConvCandidates, i: int, batch: tuple, price: tuple) -> bool:
    """Candidate ``i``'s streaming weight tiles come in batches (where the ring fits): its
    LOAD_WEIGHTS + MATMUL pair (``mxu_pair_cycles`` + 6) is shorter than a one-tile DMA
    (``tile_dma_cycles``: the MXU waits for weight DMAs), or its LOAD time at ``price`` (one DMA
    per tile) is at least its MXU time (the LOAD channel bounds the layer: windows and skip tiles
    share it with the weights, so fewer DMA instructions shorten it) and the round trips the
    batches save outweigh the first batch's wait (``_saves_round_trips``: bert-tiny's attention
    MatMuls, one batch each, lost ~480 cycles a layer). Else a batch only delays the first
    MATMUL of each batch. ``batch``: ``_batch_key`` (the weight batch, ``tile_dma_cycles``)."""
    pair, load_b, dma, mxu, wtiles = c.pays_memo.get(i) or _pays_terms(c, i)
    if pair < batch[1]:
        return True
    return load_b / price[0] + dma * price[1] >= mxu and bool(_saves_round_trips(wtiles, c.key, batch[0], price))


def _pays_terms(c: ConvCandidates, i: int) -> tuple:
    """What ``_batch_pays`` weighs of candidate ``i`` whatever the price (stored in
    ``c.pays_memo``): its LOAD_WEIGHTS + MATMUL pair's cycles (``mxu_pair_cycles`` + 6), its load
    bytes, DMA instructions and MXU cycles (Python floats) and its streaming weight tiles."""
    t, key = c.table, c.key
    pair = int(t.pair_cycles[t.pair[i]])
    load_b, dma, _, mxu, *_ = c.terms_at(i)
    (kh, kw), KB, NB = key[0], key[2], key[3]
    wtiles = int(t.ntiles[t.pair[i]]) * (NB * KB * kh * kw - c.nres(i))
    out = c.pays_memo[i] = (pair, load_b, dma, mxu, wtiles)
    return out


def _saves_round_trips(wtiles, key: tuple, gb: int, price: tuple):
    """Batches of ``gb`` (``weight_batch_tiles``) over ``wtiles`` streaming weight tiles (int or
    int64 array) save more DMA round trips (``price``'s cycles per DMA) than the first batch's
    other tiles add before the first MATMUL (their ``C x W`` bytes at ``price``'s rate)."""
    return (wtiles - -(-wtiles // gb)) * price[1] > (gb - 1) * key[7] * key[6] / price[0]


def _search_set(c: ConvCandidates, gb: int) -> _SearchSet:
    """``c``'s ``_SearchSet`` at weight batch ``gb`` (made on first use; with batches its rows
    stored as ``c.searches[("rows", gb)]`` as well: the set drops candidates, those rows stay)."""
    out = c.searches.get(gb)
    if out is None:
        rows = c.live_rows
        if gb > 1:
            rows = np.empty((9, len(c.live)))
            rows[:6] = c.live_rows
            _batch_rows(c, gb, out=rows[6:])
            rows.flags.writeable = False
            c.searches[("rows", gb)] = rows
        out = c.searches[gb] = _SearchSet(c.live, rows)
    return out


def _batch_rows(c: ConvCandidates, gb: int, out: np.ndarray) -> np.ndarray:
    """Per live streaming candidate of ``c`` (float64 rows): the DMA instructions batches of
    ``gb`` weight tiles save where the ring of two bank-started halves fits next to its tables,
    outputs and input slots (on their own banks if the candidate's are; else 0), those they save
    if it does, and its LOAD_WEIGHTS + MATMUL pair's cycles (``mxu_pair_cycles`` + 6), in ``out``
    (a (3, live) float64 array)."""
    t, key, live = c.table, c.key, c.live
    (kh, kw), KB, NB = key[0], key[2], key[3]
    pair = t.pair[:len(live)] if len(live) == c.nstream else t.pair.take(live)   # (all fit: a view)
    fits = _batch_fits(c, gb)
    wtiles = t.ntiles * (NB * KB * kh * kw)
    np.take((wtiles - -(-wtiles // gb)).astype(np.float64), pair, out=out[1], mode="clip")   # (valid indices)
    np.multiply(out[1], fits, out=out[0])           # (x 1.0 or 0.0: where(fits, row 1, 0.0))
    np.take(t.pair_cycles.astype(np.float64), pair, out=out[2], mode="clip")
    return out


def _batch_fits(c: ConvCandidates, gb: int) -> np.ndarray:
    """Per live streaming candidate of ``c``: the ring of two bank-started halves of ``gb`` weight
    tiles fits next to its tables, outputs and input slots (on their own banks if the
    candidate's are), a bool array (stored in ``c.searches`` under ``("fits", gb)``)."""
    fits = c.searches.get(("fits", gb))
    if fits is None:
        b, key, live = c.bank, c.key, c.live
        C, bwd, sram_words = key[7], key[12], key[13]
        if len(live) == c.nstream:          # all fit: the first nstream (views, not copies)
            packed_w, aligned_w = b.packed_words, b.aligned_words
        else:
            packed_w, aligned_w = b.packed_words.take(live), b.aligned_words.take(live)
        half = int(weight_region_words(gb, C, bwd))
        ring = round_up(half, bwd) + half
        # the bank table's words with the ring instead of two weight slots (packed: 2 C words; on
        # their own banks: ``weight_region_words(2)`` rounded to a bank), against the SRAM size
        packed = packed_w <= sram_words - (ring - 2 * C)
        aligned = aligned_w <= sram_words - (round_up(ring, bwd) - round_up(int(weight_region_words(2, C, bwd)), bwd))
        fits = c.searches[("fits", gb)] = np.where(c.live_rows[5] == 0, aligned, packed)      # row 5: unaligned
    return fits


def _batched_terms(rows: np.ndarray, gb: int, key: tuple, price: tuple, tile_dma) -> tuple:
    """(The cost terms (``ConvCandidates.terms``' order) of the candidates of ``_SearchSet`` rows
    at weight batch ``gb`` > 1, their DMA instructions counting one per batch where
    ``_conv_choice`` gives the candidate batches: the ring fits (row 6) and batches pay
    (``_batch_pays``, at ``price``; ``tile_dma``: ``tile_dma_cycles``), their load bytes over
    ``price``'s bandwidth (a new array: ``est_cycles``' ``load_t``)). ``price`` and ``tile_dma``
    may be (prices, 1) columns: then (prices, candidates) arrays."""
    load_b, dma, mxu = rows[0], rows[1], rows[2]
    load_t = load_b / price[0]
    t = dma * price[1]
    t += load_t                         # (load_t + DMA time: the same sum either way round)
    fast = t >= mxu
    fast &= rows[7] * price[1] > (gb - 1) * key[7] * key[6] / price[0]
    fast |= rows[8] < tile_dma
    np.multiply(rows[6], fast, out=t)   # row 6 where batches are given, else 0.0 (dma - 0.0: dma)
    return (load_b, np.subtract(dma, t, out=t), rows[4], mxu, rows[5], rows[3]), load_t


#: (conv_candidates_key, candidate, weight batch) -> ``_conv_choice``'s result
_CHOICES: dict = {}
_CHOICES_MAX = 1 << 16


def _conv_choice(node: str, key: tuple, c: ConvCandidates, i: int, batch: tuple, cfg: HwConfig,
                 price: tuple) -> tuple:
    """The ConvTiling fields of candidate ``i`` but ``est_cycles`` (th, tw, nbg, kbg, ni, nw,
    s_out, ih, iw, regions (slot bases as ranges or tuples: ``tile_conv`` makes them lists), load_bytes,
    aligned, slot_words, acc_halves, pool_th, pool_tw, wbatch): the most
    weight slots (``2 * weight_batch_tiles`` if that is more than 1 and a LOAD_WEIGHTS + MATMUL
    pair of the tile's M vectors, ``mxu_pair_cycles`` + 6, is shorter than a one-tile DMA,
    ``tile_dma_cycles``, or the candidate's LOAD time at ``price`` is at least its MXU time
    (``_batch_pays``): two batches of tiles, each batch loaded by one DMA while the MXU reads
    the other, ``wbatch`` = the batch; else 4, 3, 2 and ``wbatch`` 1; weights resident: one per
    weight tile of the layer) whose regions fit, bank-aligned
    if the candidate is and that fits, else packed. A conv without a fused Add or pool first tries
    output slots of 3x and 2x the candidate's ``s_out`` (accumulator rows, capped at th*tw), and
    keeps the largest ``s_out`` its regions then fit (fewer, longer STOREs; docs/backend.md,
    "Deferred requantization").
    ``batch``: ``_batch_key(cfg)``. Cached by ``key``, ``i`` and the weight batch (the DMA fields and ``price``
    matter only through it; ``conv_regions`` and the slot sizes read only the array, table,
    bank, SRAM and accumulator fields ``key`` holds; the region search itself is shared by the
    candidates of any key that give it the same inputs: ``_new_choice``). CompileError naming
    the conv ``node`` if no region set fits."""
    gb = batch[0]                       # ``_batch_key``: from DMA fields, not in ``key``
    if gb > 1 and not _batch_pays(c, i, batch, price):      # (else no price matters)
        gb = 1      # the MXU's pairs outlast a tile's DMA and bound the layer: one-tile DMAs keep it fed
    out = c.choice_memo.get((i, gb))
    if out is None:
        out = _CHOICES.get((key, i, gb))
        if out is None:
            out = _new_choice(node, key, c, i, gb, cfg)
        c.choice_memo[(i, gb)] = out
    return out


#: what ``_new_choice``'s region search reads (``_region_key``) -> its result (weight slots, output
#: slot, regions, aligned, weight batch; None if no region set fits)
_REGIONS: dict = {}


def _new_choice(node: str, key: tuple, c: ConvCandidates, i: int, gb: int, cfg: HwConfig) -> tuple:
    """``_conv_choice``'s regions for candidate ``i`` with weight batches of ``gb`` (1: none),
    stored in ``_CHOICES``. The region search (``_region_search``) is shared through
    ``_REGIONS`` by the candidates (of any key) whose inputs to it are equal: the array's
    columns, the table and requant-plane words, bank and SRAM words, the fused Add and pooled
    outputs, the tile's accumulator rows (th * tw) and output slot chunk, the input slots and
    their words, the resident weight tiles (and whether they are all of them), whether the
    candidate's slots fit on their own banks and ``gb`` (not the accumulator depth or the cout
    and cin groups, which the regions do not read). CompileError naming the conv ``node`` if no
    region set fits."""
    t = c.table
    p = t.pair.item(i)
    nres = c.nres(i)
    (kh, kw), KB, NB = key[0], key[2], key[3]
    rkey = (key[7], key[9], key[10], key[11], key[12], key[13], key[16], t.PTH.item(p) * t.PTW.item(p), t.M.item(p),
            c.s_out.item(p), t.ni.item(i), t.slot.item(i), nres, nres == KB * NB * kh * kw, c.aligned_at(i), gb)
    got = _REGIONS.get(rkey, _UNSEEN)
    if got is _UNSEEN:
        if len(_REGIONS) >= _CHOICES_MAX:
            _REGIONS.clear()
        got = _REGIONS[rkey] = _region_search(cfg, *rkey[6:])
    if got is None:
        raise CompileError(f"QConv {node!r}: internal SRAM allocation failed")
    return _store_choice(key, i, gb, c, cfg, *got)


def _region_search(cfg: HwConfig, skip: bool, pooled: int, M: int, s_out: int, ni: int, slot: int, nres: int,
                   full: bool, aligned: bool, gb: int) -> tuple | None:
    """``_conv_choice``'s region search for a tile of ``M`` accumulator rows (output slot chunk
    ``s_out``), ``ni`` input slots of ``slot`` words, ``nres`` resident weight tiles (``full``:
    all of them), a fused Add (``skip``) or ``pooled`` outputs, slots on their own banks if
    ``aligned`` and that fits, weight batches of ``gb``: (weight slots, output slot, regions
    (slot bases as ranges or tuples: ``tile_conv`` makes them lists), aligned, weight batch), or
    None if no region set fits. Only the regions kept are returned; the others are only
    checked."""
    nws = (0,) if full else tuple(dict.fromkeys(((2 * gb,) if gb > 1 else ()) + (4, 3, 2)))
    s_outs = [s_out] if pooled or skip else list(dict.fromkeys([min(M, f * s_out) for f in (3, 2)] + [s_out]))
    ring = nws[:1] if gb > 1 and nws[0] == 2 * gb else ()       # the batch ring before larger output slots
    if skip and aligned:                # (plain convs too: medium -0.1 %, seed squeezenet +0.04 %)
        out = _split_choice(cfg, nres, nws, gb, s_out, ni, slot)
        if out is not None:
            return out
    for al, s, nw in [(a, s, n) for a in ((True, False) if aligned else (False,))
                      for n_set in ((ring, nws[len(ring):]) if ring else (nws,))
                      for s in s_outs for n in n_set]:
        wb = gb if nw == 2 * gb and gb > 1 else 1
        regs = conv_regions(cfg, nres + nw, s, ni, slot, al, skip=skip, pooled=pooled, wbatch=wb, lists=False)
        if regs is not None and not (pooled or skip):      # the largest output slots that fit
            s, regs = _largest_out_slot(cfg, nres + nw, s, M, ni, slot, al, wb, regs["o"][0], regs)
        if regs is not None:
            return nw, s, regs, al, wb
    return None


def _store_choice(key: tuple, i: int, gb: int, c: ConvCandidates, cfg: HwConfig, nw: int, s_out: int, regs: dict,
                  aligned: bool, wb: int) -> tuple:
    """``_conv_choice``'s result for candidate ``i`` with these regions, stored in ``_CHOICES``."""
    t = c.table
    th, tw, nbg, kbg, ni, ih, iw, p = (a.item(i) for a in (t.th, t.tw, t.nbg, t.kbg, t.ni, t.ih, t.iw, t.pair))
    # (the array, table and accumulator fields of ``cfg`` as ``key`` holds them: ``conv_candidates_key``)
    C, pw, mg, mp, acc_depth, skip = key[7], key[9], key[10], key[11], key[14], key[16]
    pth, ptw = t.PTH.item(p), t.PTW.item(p)
    if len(_CHOICES) >= _CHOICES_MAX:
        _CHOICES.clear()
    slot = kbg * ih * iw
    slot_words = {"w": C, "p": mg * pw, "o": mp * s_out, "i": slot}      # ("p": ``table_slot_words``)
    if skip:
        slot_words["s"] = mp * s_out
    if pth:
        slot_words["q"] = mp * pth * ptw
    out = _CHOICES[(key, i, gb)] = (th, tw, nbg, kbg, ni, nw, s_out, ih, iw, regs, c.load_bytes(i), aligned,
                                    slot_words, 2 * nbg * th * tw <= acc_depth, pth, ptw, wb)
    return out


#: a fused residual Add's output slots split into parity groups may shrink to this share of the
#: bank-sized chunk (``_split_choice``), no further
SPLIT_MIN_SHARE = 0.5


def _split_choice(cfg: HwConfig, nres: int, nws: tuple, gb: int, s_out: int, ni: int, slot: int) -> tuple | None:
    """A fused residual Add's regions on their own banks with the output and skip slots in two
    parity groups (``conv_regions(split=True)``): the largest output slots from ``s_out`` down to
    ``SPLIT_MIN_SHARE`` of it that fit with the first of the weight rings ``nws`` that fits
    (``_largest_split_slot``), as ``_region_search``'s result; None if none does (the regions
    are then packed as before)."""
    lo = max(1, int(s_out * SPLIT_MIN_SHARE))
    for nw in nws:
        wb = gb if nw == 2 * gb and gb > 1 else 1
        regs = conv_regions(cfg, nres + nw, lo, ni, slot, True, skip=True, wbatch=wb, split=True, lists=False)
        if regs is not None:
            s, regs = _largest_split_slot(cfg, nres + nw, lo, s_out, ni, slot, wb, regs)
            return nw, s, regs, True, wb
    return None


def _largest_split_slot(cfg: HwConfig, nw: int, lo: int, hi: int, ni: int, slot: int, wbatch: int,
                        regs: dict) -> tuple:
    """(The largest output slot in ``lo`` .. ``hi`` whose ``conv_regions(split=True)`` (a fused
    Add's, on their own banks) fit, those regions), given ``regs``: those at ``lo``, which fit.
    The regions' end grows with the slot, so the answer is where they stop fitting: worked out
    from the layout for either place of the tables (``conv_regions`` takes the first that fits:
    before the outputs, or on a bank of their own after the input slots; what comes before them
    does not depend on the slot), each parity group ``1 + SKIP_SLOTS // 2`` slots of
    ``requant_planes`` words a row, the second and each input slot from a bank's start: the
    second group starts at a multiple g of the bank words, the groups fit around g while
    ``min(g - first group's start, room's end - g)`` holds a group, largest at the multiples
    next to the middle; checked with ``conv_regions`` at it and one past it, else (never met)
    found by bisection."""
    def regions(s):
        return conv_regions(cfg, nw, s, ni, slot, True, skip=True, wbatch=wbatch, split=True, lists=False)

    bw, tsw, group = cfg.bank_words, table_slot_words(cfg), (1 + SKIP_SLOTS // 2) * cfg.requant_planes
    start = regs["o"][0] - (0 if regs["p"][0] > regs["o"][0] else 2 * tsw)        # the weights' end, to a bank
    inputs = (ni - 1) * round_up(slot, bw) + slot           # words from the first input slot's start
    best = lo
    for base, top in ((start + 2 * tsw, cfg.sram_words), (start, (cfg.sram_words - 2 * tsw) // bw * bw)):
        end = (top - inputs) // bw * bw                     # the last start the first input slot may have
        g = (base + end) // 2 // bw * bw
        best = max(best, min(g - base, end - g) // group, min(g + bw - base, end - g - bw) // group)
    return _last_fitting(regions, lo, hi, min(hi, best), regs)


def _largest_out_slot(cfg: HwConfig, nw: int, lo: int, hi: int, ni: int, slot: int, aligned: bool, wbatch: int,
                      base: int, at_lo: dict | None = None) -> tuple:
    """(The largest output slot (accumulator rows) in ``lo`` .. ``hi`` whose ``conv_regions`` (no
    skip or pooled slots) fit, those regions (``lists`` False)), given that they fit at ``lo``
    (``at_lo``: those regions, if known) and that the output slots start at word ``base`` (what
    comes before them does not depend on their size). The regions' end grows with the slot, so the answer is where they stop fitting:
    worked out from the layout (two output slots of ``requant_planes`` words a row, then ``ni``
    input slots of ``slot`` words, each from a bank's start if ``aligned``), checked with
    ``conv_regions`` at it and one past it, else (never met) found by bisection."""
    def regions(s):
        return conv_regions(cfg, nw, s, ni, slot, aligned, wbatch=wbatch, lists=False)

    bw, mp = cfg.bank_words, cfg.requant_planes
    if aligned:         # the slots after the outputs start at round_up(end of outputs, bw)
        end = (cfg.sram_words - (ni - 1) * round_up(slot, bw) - slot) // bw * bw
    else:
        end = cfg.sram_words - ni * slot
    return _last_fitting(regions, lo, hi, min(hi, max(lo, (end - base) // (2 * mp))), at_lo)


def _last_fitting(regions, lo: int, hi: int, s: int, at_lo: dict | None = None) -> tuple:
    """(The largest output slot in ``lo`` .. ``hi`` whose ``regions(slot)`` are not None, those
    regions), given that they are at ``lo`` (``at_lo``: those regions, if known) and grow with
    the slot: ``s`` (worked out from the layout) if its regions fit and those of ``s + 1`` do not
    (or ``s`` is ``hi``), else (never met) found by bisection."""
    got = at_lo if s == lo and at_lo is not None else regions(s)
    if got is not None and (s == hi or regions(s + 1) is None):
        return s, got
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if regions(mid) is not None:
            lo = mid
        else:
            hi = mid - 1
    return lo, regions(lo)


@lru_cache(maxsize=None)
def field_max(opcode: str, field: str) -> int:
    """Largest value of an unsigned instruction field (tpusim.arch.isa.OPCODES)."""
    spec = next(f for f in OPCODES[opcode].fields if f.name == field)
    return (1 << spec.bits) - 1


def tile_vector(nblocks: int, kernel, strides, oh: int, ow: int, cfg: HwConfig, cost) -> EltTiling | None:
    """The cheapest tile of a vector-unit op (pool, add): th output rows x tw columns (tw a multiple
    of ``align_px`` unless it is the whole row) x kbg channel blocks, reading an ih x iw input
    window (iw with ``align_px - 1`` columns of slack for the aligned DMA); of equal costs the
    first in the order of ``vector_candidates``.

    cost(th, tw, ih, iw, kbg, ntiles) -> estimated cycles of the op with each tile: int64 arrays
    of the candidates in, a float64 array out (inf where the tile does not fit). Returns None if
    no tile fits."""
    c = vector_candidates(nblocks, tuple(kernel), tuple(strides), oh, ow, align_px(cfg))
    est = cost(c.th, c.tw, c.ih, c.iw, c.kbg, c.ntiles)
    i = int(np.argmin(est))
    if not np.isfinite(est[i]):
        return None
    return EltTiling(int(c.th[i]), int(c.tw[i]), int(c.kbg[i]), int(c.ih[i]), int(c.iw[i]), est_cycles=float(est[i]))


class VectorCandidates(NamedTuple):
    """The tiles ``tile_vector`` weighs (int64 arrays, in its order)."""
    th: np.ndarray
    tw: np.ndarray
    ih: np.ndarray
    iw: np.ndarray
    kbg: np.ndarray
    ntiles: np.ndarray


@lru_cache(maxsize=1024)
def vector_candidates(nblocks: int, kernel: tuple, strides: tuple, oh: int, ow: int, ap: int) -> VectorCandidates:
    """Every tile of an oh x ow output of ``nblocks`` channel blocks: tw (``_cands`` of ow,
    multiples of ``ap`` pixels), th (``_cands`` of oh), kbg (halvings of ``nblocks``) nested, each
    largest first, with its input window (ih, iw: ``kernel``, ``strides``, ``ap - 1`` columns of
    slack) and its tile count. Cached (read-only arrays)."""
    (kh, kw), (sh, sw) = kernel, strides
    tw, th, kbg = _product(np.array(_cands(ow, ap), np.int64), np.array(_cands(oh), np.int64),
                           np.array(_pow_cands(nblocks), np.int64))
    out = VectorCandidates(th, tw, (th - 1) * sh + kh, (tw - 1) * sw + kw + (ap - 1), kbg,
                           -(-oh // th) * -(-ow // tw) * -(-nblocks // kbg))
    for a in out:
        a.flags.writeable = False
    return out


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
    groups)`` -> cycles (arrays, inf where a tile does not fit, as for ``tile_vector``);
    ``words(tl)`` -> {region: words of one slot}. None if neither fits."""
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
