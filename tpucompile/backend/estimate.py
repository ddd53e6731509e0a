"""The compiler's fast cost model: estimated cycles, DDR bytes and MACs of a QGraph on a hardware
configuration, per layer, without emitting or simulating a program (architecture sweeps rank
thousands of candidate chips with it; tpusim.flow.sweep checks it against the SimPy model).

How a layer is estimated:
  1. the back end's own ``host_transforms``, ``layout`` and ``tiling`` decisions (each cached on
     exactly the configuration attributes it read, ``cfgmemo.ReadMemo``, the tiling per layer
     shape: a sweep redoes a stage only when what that stage read changes; a conv's tiling is the
     conv tiler's stored pick for its candidate table and DMA price, ``Estimator._conv_tiling``);
  2. each op's ``work`` hook (``ops.registry.DeviceOp.work``; ``generic_work`` for ops without
     one) turns the tiling into a ``LayerWork``: DMA instructions (count x bursts), MXU and VPU
     busy cycles, tiles;
  3. the timing, for all layers at once (numpy; ``estimate_many``: for all the configs of one
     geometry at once): DMA instructions are timed by
     ``tpusim.arch.dma_timing`` (the burst recurrences of docs/architecture.md on an idle chip),
     and a request that finds the other channel's burst on the shared DDR bus waits for the
     rest of it, on average half a burst; the engines of a layer overlap (tiles are
     double-buffered), so the layer takes the busiest of LOAD, STORE, the DDR bus, MXU and VPU,
     plus the pipeline's fill (the first tile's loads) and drain (the last tile's compute and
     store); a tiling with one slot group runs its engines in turn;
  4. the layers overlap (``_Geometry.overlap``): each engine runs the layers' instructions in
     program order, so a layer's first LOADs can start once the previous layer's last LOAD is
     done, under its drain (last tile's compute and STOREs): all of the drain when the layer
     does not read the previous one (independent layers: a transformer's Q, K and V
     projections, its attention heads), ``READ_OVERLAP`` of it when it does (the program's
     DDR hazards are per byte range, docs/backend.md "Cross-layer overlap": the first rows it
     reads are usually stored before the last); its compute starts no earlier than the
     previous layer's last compute ends. bert-tiny (make estimator-eval, 18 configs): without
     the overlap +10 to +39 % over SimPy, with it within 8 %. The share is one number chosen
     over the evaluation's sets (0: bert-tiny still +14 %; 0.5: the CNNs -4 % on average; 0.4
     balances them), so those sets are not a holdout for it. ``Estimate.cycles`` is the
     overlapped total; the per-layer ``layer_cycles`` stay each layer's own span.

Units: cycles are core cycles, bytes are DDR bytes. Errors: CompileError naming the op, as the
back end raises it (a layer that does not fit the SRAM of the configuration).
"""
from __future__ import annotations

import dataclasses
import functools
import gc
import operator
from dataclasses import dataclass

import numpy as np

from tpucompile.backend import pipeline
from tpucompile.backend.cfgmemo import ReadMemo
from tpucompile.backend.fuse_residual import fuse_residual, fused_pairs, fusion_candidates
from tpucompile.backend.tiling import conv_candidates_key, conv_price, conv_tiling, known_pick, prices_ahead
from tpucompile.backend.work import generic_work
from tpucompile.ops import OP_TABLE
from tpucompile.qgraph import QGraph
from tpusim.arch.config import HwConfig
from tpusim.arch.dma_timing import EXACT_BURSTS, DmaTiming
from tpusim.arch.errors import CompileError

#: core cycles an engine spends between instructions (dispatch, token hand-over)
ISSUE_CYCLES = 2

#: the share of a layer's drain (its last tile's compute and STOREs) that the next layer, reading its
#: output, runs under (chosen over make estimator-eval's sets, 0 / 0.25 / 0.4 / 0.5 / 1 tried: module docstring)
READ_OVERLAP = 0.4


BOUNDS = ("load", "store", "ddr", "mxu", "vpu", "serial")


@dataclass(frozen=True)
class LayerEstimate:
    """One layer's estimate: core cycles, DDR bytes, MACs, the engine that bounds it (``BOUNDS``),
    and the dynamic energy (uJ) of its events at ``cfg.energy`` (tpusim.arch.costs)."""
    name: str
    op: str
    cycles: float
    load_bytes: int
    store_bytes: int
    macs: int
    bound: str
    energy_uj: float


@dataclass(frozen=True)
class Estimate:
    """A whole graph's estimate: per-layer arrays (float64, layer order) and their sums."""
    config: str
    names: tuple
    kinds: tuple
    layer_cycles: np.ndarray
    load_bytes: np.ndarray
    store_bytes: np.ndarray
    layer_macs: np.ndarray
    bound_index: np.ndarray
    layer_energy_uj: np.ndarray
    total_cycles: float             # the whole graph, layers overlapped (``_Geometry.overlap``)

    @property
    def cycles(self) -> int:
        return int(round(self.total_cycles))

    @property
    def ddr_bytes(self) -> int:
        return int(self.load_bytes.sum() + self.store_bytes.sum())

    @property
    def macs(self) -> int:
        return int(self.layer_macs.sum())

    @property
    def energy_uj(self) -> float:
        return float(self.layer_energy_uj.sum())

    @property
    def layers(self) -> tuple:
        """One LayerEstimate per layer."""
        return tuple(LayerEstimate(n, k, float(c), int(lb), int(sb), int(m), BOUNDS[b], float(e))
                     for n, k, c, lb, sb, m, b, e in zip(self.names, self.kinds, self.layer_cycles, self.load_bytes,
                                                         self.store_bytes, self.layer_macs, self.bound_index,
                                                         self.layer_energy_uj))


class _Geometry:
    """The layers of one geometry (``_geometry_key``) as arrays: per layer the engines' cycles,
    bytes, event counts; per DMA channel its instructions as (bin, table slot, count) triples
    (``_Channel``): a DMA timing's ps per burst count are tabled once (``_Flats.tables``), and
    the points evaluated together sum their layers' instructions in one ``np.bincount``."""

    def __init__(self, layers: list, flats: _Flats | None = None, after: tuple | None = None) -> None:
        """``layers``: (name, op kind, LayerWork, MACs) per layer; ``flats``: the ``_Flat`` of
        each LayerWork and the DMA timings' tables (``_Flats``, shared by the geometries of an
        Estimator; default: this geometry's own); ``after``: per layer the index of the last
        earlier layer it reads (``last_producers``; -1: none; default: each layer reads the one
        before it)."""
        self.after = tuple(range(-1, len(layers) - 1)) if after is None else tuple(after)
        self.names = tuple(n for n, _, _, _ in layers)
        self.kinds = tuple(k for _, k, _, _ in layers)
        self._flats = flats = _Flats() if flats is None else flats
        flat = [flats.of(w) for _, _, w, _ in layers]
        rows = np.array([f.row for f in flat], dtype=np.float64).reshape(-1, 10)
        (self.mxu, self.vpu, self.drain, self.load_bytes, self.store_bytes, self.sram_words, self.acc,
         self.exposed, self.load_bursts, self.store_bursts) = (np.ascontiguousarray(c) for c in rows.T)
        self.macs = np.array([m for _, _, _, m in layers], dtype=np.float64)
        self.serial = np.array([f.serial for f in flat], dtype=bool)
        self.any_serial = bool(self.serial.any())
        self.load = _Channel([f.load for f in flat])
        self.store = _Channel([f.store for f in flat])
        self._energy: dict = {}            # _prices -> per-layer energy (uJ)

    def energy(self, prices: tuple) -> np.ndarray:
        """Per-layer dynamic energy (uJ) at ``prices`` (``_prices``), computed once per prices."""
        e = self._energy.get(prices)
        if e is None:
            mac_pj, sram_pj, acc_pj, ddr_pj, word_bytes = prices
            ddr = self.load_bytes + self.store_bytes
            e = self._energy[prices] = (self.macs * mac_pj + (ddr + self.sram_words * word_bytes) * sram_pj
                                        + self.acc * acc_pj + ddr * ddr_pj) * 1e-6
            e.flags.writeable = False      # shared by the Estimates of these prices
        return e

    def evaluate(self, cfg: HwConfig, dt, core_ps: int, prices: tuple) -> Estimate:
        """The Estimate on ``cfg`` (its DmaTiming ``dt``, core clock period ``core_ps``, ``_prices``)."""
        return self.evaluate_many([(cfg, dt, core_ps, prices)])[0]

    def evaluate_many(self, points: list) -> list:
        """``evaluate`` of each (config, DmaTiming, core ps, prices) point, in order: the points'
        per-layer arrays stacked, (points, layers), each step one numpy pass over all of them (each
        element the same operations as alone: the same values)."""
        core = np.array([[p[2]] for p in points], dtype=np.float64)         # (k, 1): ps per core cycle
        # ps per layer of: its instructions (each plus a DMA cycle of issue), the first tile's
        # (fill: LOADs; drain: STOREs), those on the MXU's path (exposed)
        tables = [self._flats.tables(dt) for _, dt, _, _ in points]
        load_ps, fill_ps, exposed_load_ps = self.load.sums([t for t, _ in tables])
        store_ps, drain_store_ps, exposed_store_ps = self.store.sums([t for _, t in tables])
        load, store = load_ps / core, store_ps / core
        bus = np.array([[dt.bus_burst_ps] for _, dt, _, _ in points], dtype=np.float64) / core
        load_bus, store_bus = self.load_bursts * bus, self.store_bursts * bus
        # a request that finds the other channel's burst on the bus (the share of the layer's
        # span that channel holds it) waits for the rest of it, on average half a burst
        span = np.maximum(np.maximum(load, store), np.maximum(self.mxu, self.vpu))
        span = np.maximum(span, 1.0)
        wait = load_bus * store_bus / (2 * span * bus) * bus
        load, store = load + wait, store + wait
        fill = fill_ps / core
        drain_store = drain_store_ps / core
        drain = self.drain + drain_store
        # each engine's path through the layer: what must happen before it can start (the first
        # tile's loads), its own busy time, what follows its last instruction (the last tile)
        exposed = self.exposed + (exposed_load_ps + exposed_store_ps) / core
        paths = np.stack([load + drain, fill + store, load_bus + store_bus,
                          fill + self.mxu + exposed + drain, fill + self.vpu + drain_store])
        bound = paths.argmax(axis=0)
        cycles = paths.max(axis=0)
        if self.any_serial:
            cycles = np.where(self.serial, load + store + self.mxu + self.vpu, cycles)
            bound = np.where(self.serial, len(BOUNDS) - 1, bound)
        compute = np.maximum(paths[3], paths[4]) - fill
        return [Estimate(cfg.name, self.names, self.kinds, cycles[i], self.load_bytes, self.store_bytes, self.macs,
                         bound[i], self.energy(prices), self.overlap(cycles[i], drain[i], drain_store[i], compute[i]))
                for i, (cfg, _, _, prices) in enumerate(points)]

    def overlap(self, cycles: np.ndarray, drain: np.ndarray, drain_store: np.ndarray, compute: np.ndarray) -> float:
        """The graph's cycles with the layers that do not read the layer before them overlapped
        (``independent``): each engine runs its layers' instructions in program order, so such a
        layer's first LOADs start once the previous layer's last LOAD is done (``drain`` cycles
        before its end: the last tile's compute and STOREs), or once the last layer it reads has
        ended; its compute (``compute``: the MXU's and VPU's paths without the fill) starts at
        the earliest when the previous layer's last compute ends (``drain_store`` before its
        end); a layer ends no earlier than the one before it. A layer that reads the one before it
        starts under ``READ_OVERLAP`` of that one's drain (docs/backend.md "Cross-layer overlap").
        Arrays per layer (core cycles, float64)."""
        c, dr, ds, comp = cycles.tolist(), drain.tolist(), drain_store.tolist(), compute.tolist()
        if not c:
            return 0.0
        end = c[0]
        ends = [end]
        # per layer but the first (``dr`` and ``ds`` the previous layer's): ``a`` the last layer it
        # reads when not the previous one, else None; ``max`` spelt out: each ``if x > m: m = x`` is
        # the builtin's comparison, so the same value
        for a, ci, compi, d, s in zip(_apart(self.after), c[1:], comp[1:], dr, ds):
            if a is None:
                start = end - READ_OVERLAP * d
            else:                               # not reading the layer before it
                start = end - d
                x = ends[a] if a >= 0 else 0.0
                if x > start:
                    start = x
            m = start + ci
            x = end - s + compi
            if x > m:
                m = x
            if end > m:
                m = end
            end = m
            ends.append(end)
        return end


@functools.lru_cache(maxsize=256)
def _apart(after: tuple) -> tuple:
    """Per layer but the first (``after``: ``_Geometry.after``) the last layer it reads if that is
    not the layer before it, else None."""
    return tuple(a if a < i - 1 else None for i, a in enumerate(after))[1:]


class _Flats:
    """The ``_Flat`` of each LayerWork met (by id: each holds its work, so the id stays its) and
    per DMA timing its ps tables (``tables``). One per Estimator: its geometries share both."""

    def __init__(self) -> None:
        self._flat: dict = {}              # id(LayerWork) -> its _Flat
        self._tables: dict = {}            # DmaTiming -> its ``tables``

    def of(self, w) -> _Flat:
        """The _Flat of ``w``."""
        f = self._flat.get(id(w))
        if f is None or f.work is not w:
            f = self._flat[id(w)] = _Flat(w)
        return f

    def tables(self, dt: DmaTiming) -> tuple:
        """Per DMA channel of ``dt`` (LOAD, STORE) its ``_Channel.sums`` table: (the ps of an
        instruction of 0 .. EXACT_BURSTS bursts plus a DMA cycle of issue and without it,
        interleaved: slot 2 n + 1 is ``n`` bursts without issue; float64), then the ps of
        EXACT_BURSTS bursts, the steady ps per burst beyond, the issue ps. Worked out once per
        timing (the DmaTiming is held: the key stays its)."""
        got = self._tables.get(dt)
        if got is None:
            issue = float(dt.dma.period_ps)
            got = self._tables[dt] = tuple((np.stack((ps + issue, ps), axis=1).ravel(), ps[EXACT_BURSTS], slope, issue)
                                           for ps, slope in (dt.load_ps_table(), dt.store_ps_table()))
        return got


class _Flat:
    """One LayerWork as ``_Geometry`` takes it: ``row`` (float64: MXU and VPU cycles with issue, drain
    cycles, load and store bytes, SRAM words, accumulator accesses, exposed cycles, load and
    store bursts), ``serial``, and per DMA channel its instructions (``_Channel``'s three
    sets: all, fill or drain, exposed) as (bursts int64, count float64, set int64) arrays."""

    def __init__(self, w) -> None:
        self.work = w
        self.row = np.array((w.mxu_cycles + ISSUE_CYCLES * w.mxu_instrs, w.vpu_cycles + ISSUE_CYCLES * w.vpu_instrs,
                             w.drain_cycles, w.load_bytes, w.store_bytes, w.sram_words, w.acc_accesses,
                             w.exposed_cycles) + w.totals(), dtype=np.float64)
        self.serial = w.serial
        self.load = self._sets(w.loads, _counts(w.fill_bursts), w.exposed_loads)
        self.store = self._sets(w.stores, _counts(w.drain_bursts), w.exposed_stores)

    @staticmethod
    def _sets(every: dict, ends: dict, exposed: dict) -> tuple:
        """The three sets' (bursts -> instructions) maps as ``_Flat``'s arrays, in that order."""
        return (np.array([*every, *ends, *exposed], dtype=np.int64),
                np.array([*every.values(), *ends.values(), *exposed.values()], dtype=np.float64),
                np.array([0] * len(every) + [1] * len(ends) + [2] * len(exposed), dtype=np.int64))


class _Channel:
    """One DMA channel's instructions in a geometry (per layer ``_Flat``'s arrays of it),
    flattened into (bin = set x layers + layer, slot in a ``_Flats.tables`` table, count)
    arrays, the entries of a bin in the order of the layer's map; the instructions of more than
    EXACT_BURSTS bursts (``big``) extrapolated from the table's last as ``DmaTiming`` does:
    their bursts beyond it (``over``) and 1.0 for those of the first set (issue included)."""

    def __init__(self, per_layer: list) -> None:
        self.nlayers = nl = len(per_layer)
        if nl == 0:
            self.bins, self.slots, self.counts, self.big = np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), None
            return
        bursts, self.counts, sets = (np.concatenate(a) for a in zip(*per_layer))
        self.bins = sets * nl + np.repeat(np.arange(nl, dtype=np.int64), [len(b) for b, _, _ in per_layer])
        later = sets != 0                          # (no issue cycle)
        self.slots = 2 * np.minimum(np.maximum(bursts, 0), EXACT_BURSTS) + later
        big = np.flatnonzero(bursts > EXACT_BURSTS)
        self.big = big if len(big) else None
        if self.big is not None:
            self.over, self.first = bursts[big] - EXACT_BURSTS, np.where(later[big], 0.0, 1.0)

    def sums(self, tables: list) -> np.ndarray:
        """Per point (its ``_Flats.tables`` entry of this channel), set and layer the sum of
        count x ps of its instructions: three (points, layers) float64 arrays (one
        ``np.bincount`` over all points: each bin summed in the order of one point's)."""
        k, size = len(tables), 3 * self.nlayers
        ps = (np.stack([t[0] for t in tables]) if k > 1 else tables[0][0][None])[:, self.slots]
        if self.big is not None:
            last, slope, issue = np.array([t[1:] for t in tables], dtype=np.float64).T[:, :, None]
            ps[:, self.big] = (last + self.over * slope) + issue * self.first
        bins = (self.bins + np.arange(0, k * size, size, dtype=np.int64)[:, None]).ravel() if k > 1 else self.bins
        out = np.bincount(bins, weights=(self.counts * ps).ravel(), minlength=k * size)
        return out.reshape(k, 3, self.nlayers).transpose(1, 0, 2)


def last_producers(ops: list) -> tuple:
    """Per op (``(op, runs)`` pairs in program order) that ``runs`` (has a LayerWork: a view,
    which moves nothing, has none), the index among those of the last earlier one whose output
    it reads, through views (-1: it reads only graph inputs or constants)."""
    made: dict = {}                    # tensor -> index of the last running op it depends on
    out = []
    for op, runs in ops:
        last = max((made.get(t, -1) for t in op.inputs), default=-1)
        if runs:
            made[op.out] = len(out)
            out.append(last)
        else:
            made[op.out] = last
    return tuple(out)


def _counts(items: list) -> dict:
    """{item: occurrences} in the order of first occurrence (``collections.Counter``'s)."""
    out: dict = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out


def _prices(cfg: HwConfig) -> tuple:
    e = cfg.energy
    return e.mac_pj, cfg.sram_pj_per_byte, e.acc_pj_per_access, e.ddr_pj_per_byte, cfg.word_bytes


#: config fields that change neither a tiling nor a LayerWork (only the DMA timing or the costs)
_TIMING_ONLY = ("name", "dma_outstanding", "energy", "area")


_GEOMETRY_FIELDS = operator.attrgetter(*(f.name for f in dataclasses.fields(HwConfig) if f.name not in _TIMING_ONLY))


def _geometry_key(cfg: HwConfig) -> tuple:
    """The config without the fields no tiler and no work hook reads."""
    return _GEOMETRY_FIELDS(cfg)


#: the DDR timing and clock fields (the conv tiler's price, ``tiling.conv_dma_price``)
_TIMING = ("clk_core", "clk_ddr", "clk_dma", "ddr_latency_cycles")

_GROUP_FIELDS = operator.attrgetter(*(f.name for f in dataclasses.fields(HwConfig)
                                      if f.name not in _TIMING_ONLY + _TIMING))


_TIMING_FIELDS = operator.attrgetter(*_TIMING)


def _timing_group(cfg: HwConfig) -> tuple:
    """The config without its DDR timing and clocks (``estimate_many``'s groups)."""
    return _GROUP_FIELDS(cfg)


#: op fields no tiler or work hook reads: the name and scalar quantization parameters
_UNTILED_FIELDS = frozenset(("name", "relu", "x_zp", "y_zp", "zp_a", "zp_b", "zp_out", "mult_a", "shift_a",
                             "mult_b", "shift_b", "mult_out", "shift_out", "conv_name", "conv_out", "add",
                             "skip_is_a"))


def _signature(op, lays: dict) -> tuple:
    """What an op's tiling and work depend on besides the config: its class, its fields (arrays
    by shape and dtype, tensor names by the layout of the tensor) but not its name or its
    scalar quantization parameters (``_UNTILED_FIELDS``)."""
    out = [type(op).__name__]
    for f in dataclasses.fields(op):
        if f.name in _UNTILED_FIELDS and not isinstance(getattr(op, f.name), (tuple, list, np.ndarray)):
            continue
        v = getattr(op, f.name)
        if isinstance(v, np.ndarray):
            v = (v.shape, v.dtype.str)
        elif isinstance(v, str) and v in lays:
            v = _layout_signature(lays[v])
        elif isinstance(v, (list, tuple)) and any(isinstance(t, str) and t in lays for t in v):
            v = tuple(_layout_signature(lays[t]) if isinstance(t, str) and t in lays else t for t in v)
        out.append((f.name, v))
    return tuple(out)


def _layout_signature(L) -> tuple:
    """What a tiler reads of a tensor's ``ActLayout``: shape, block, border, view and map."""
    return L.shape, L.blk, L.pads, L.need, L.view_of is not None, L.view_block, L.chan_map is not None


def _tiling_value(tl) -> tuple:
    """A tiling record as a hashable value: its class and attributes but ``est_cycles`` (the
    tiler's own guess, which no work hook reads), or only its ``WORK_FIELDS`` if its class names
    them (``ConvTiling``: the fields the conv work hooks read): two tilings with the same value
    give the same LayerWork. Its dicts and lists (slot addresses and sizes: ints, strings and
    tuples of them) are taken by their repr, which tells such values apart."""
    fields = _work_fields(type(tl))
    if fields is not None:
        return (type(tl), *fields(tl))
    d = vars(tl)
    return (type(tl), tuple(d), *[repr(v) if type(v) in _CONTAINERS else v for k, v in d.items() if k != "est_cycles"])


_CONTAINERS = (dict, list)


@functools.lru_cache(maxsize=None)
def _work_fields(cls: type):
    """``operator.attrgetter`` of the class's ``WORK_FIELDS`` (a tuple of their values), None
    if it names none."""
    fields = getattr(cls, "WORK_FIELDS", None)
    return None if fields is None else operator.attrgetter(*fields) if len(fields) > 1 else \
        (lambda tl, f=fields[0]: (getattr(tl, f),))


@dataclass(frozen=True)
class _Plan:
    """The device graph of one layout and fusion (``host_transforms``, ``unfused_layout`` and
    ``fuse_residual`` of the back end): ``index`` (its number in this Estimator), ``lays``
    (tensor -> ActLayout) and per op (device order) the op, its DeviceOp, the number of its
    tiling ``_signature`` (the Estimator's: ops of one signature, in any plan, share a number)
    and its MACs."""
    index: int
    lays: dict
    layers: tuple
    sigs: tuple                 # per op its signature number
    distinct: tuple             # (op, DeviceOp, signature number) of each signature's first op, in order


@dataclass(frozen=True)
class _Layout:
    """One unfused layout (``pipeline.unfused_layout``): its number in the Estimator, the
    LayoutPlan (whose ``graph.cfg`` is the view of the config it was made on: read nothing
    from it), and its ``fusion_candidates``."""
    index: int
    plan: pipeline.LayoutPlan
    candidates: dict


class Estimator:
    """Estimates of one QGraph on many configurations. Every stage is cached on exactly the
    config attributes it reads (``cfgmemo.ReadMemo``): the unfused layout, each fusion hook's
    answer, each layer's tiling and work record (shared by the layers of the same
    ``_signature``, in every layout and fusion; work records by the tiling's value), the arrays
    of a geometry (by its work records), the DMA timing; so a sweep redoes only what the knobs
    it turns can change, and whole configs differing only in DMA depth or cost tables share one
    geometry. The layout reads no DDR timing or clock, the fusion may (a fused pool weighs the
    tilings): a new DDR timing costs the fusion hooks that read it, and a new plan only if the
    fusion changes; an op whose fusion hooks read no config attribute (a residual Add's) has its
    pair decided once per layout, not asked again. Tilings are interned by value, so work records are keyed by identity. A
    conv-tiled op's tiling (``DeviceOp.conv_shape``: every config is a new one, at its DDR timing)
    is instead the tiler's stored pick (``_conv_tiling``): its candidate table's key kept per
    timing group, the price per config, one tiling per picked choice."""

    def __init__(self, qg: QGraph) -> None:
        qg.validate()
        self.qg = qg
        self._layouts, self._accepts = ReadMemo(), ReadMemo()
        self._tilings, self._works, self._timings = ReadMemo(), ReadMemo(), ReadMemo()
        self._plans: dict = {}             # (layout number, fused pairs) -> _Plan
        # layout number -> (the fused pairs of the ops whose fusion hooks read no config attribute, the
        # candidates of the others: ``fusion_candidates``' form)
        self._fixed_pairs: dict = {}
        self._sig_ids: dict = {}           # _signature -> its number
        self._interned: dict = {}          # _tiling_value -> the first tiling of that value
        self._by_works: dict = {}          # (plan, work records) -> _Geometry
        self._after: dict = {}             # (plan, signatures without a work record) -> last_producers
        self._flats = _Flats()             # the _Flat of each work record, the DMA timings' tables
        self._geometries: dict = {}        # _geometry_key -> _Geometry
        self._groups: dict = {}            # _timing_group -> its number
        self._conv_shapes: dict = {}       # signature number of a conv-tiled op -> its DeviceOp.conv_shape
        self._conv_keys: dict = {}         # (signature number, group number) -> its conv_candidates_key
        self._pick_tilings: dict = {}      # (id(_conv_choice), resident tiles) -> (that choice, interned tiling)

    def _layout(self, cfg) -> _Layout:
        dg = pipeline.host_transforms(pipeline.DeviceGraph(self.qg, cfg, pipeline.BackendOptions()))
        lp = pipeline.unfused_layout(dg)
        return _Layout(len(self._layouts), lp, fusion_candidates(lp.qg, lp.tensors))

    def _plan(self, cfg: HwConfig) -> _Plan:
        lay = self._layouts.get((), cfg, self._layout)
        lp, accepts = lay.plan, self._accepts

        def accept(j: int, i: int) -> bool:
            op, producer = lp.qg.ops[j], lp.qg.ops[i]
            hook = OP_TABLE.device(op).fuse_producer
            return accepts.get((lay.index, j, i), cfg, lambda c: hook(op, producer, lp.tensors, c) is not None)

        split = self._fixed_pairs.get(lay.index)
        if split is None:
            pairs = fused_pairs(lp.qg, lp.tensors, cfg, accept, lay.candidates)
            fixed = {j for j, cands in lay.candidates.items()
                     if all(accepts.reads_nothing((lay.index, j, i)) for i in cands)}
            self._fixed_pairs[lay.index] = ({j: i for j, i in pairs.items() if j in fixed},
                                            {j: c for j, c in lay.candidates.items() if j not in fixed})
        else:
            fixed, asked = split
            pairs = {**fixed, **fused_pairs(lp.qg, lp.tensors, cfg, accept, asked)} if asked else fixed
        key = (lay.index, tuple(sorted(pairs.items())))
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._new_plan(fuse_residual(lp, pairs))
        return plan

    def _new_plan(self, lp: pipeline.LayoutPlan) -> _Plan:
        sigs = self._sig_ids               # signature -> its number in this Estimator
        layers = tuple((op, OP_TABLE.device(op), sigs.setdefault(_signature(op, lp.tensors), len(sigs)),
                        int(OP_TABLE.device(op).macs(orig, lp.graph.qg)))
                       for op, orig in zip(lp.qg.ops, lp.graph.qg.ops))
        firsts: dict = {}                  # signature number -> its first op
        for op, dev, sig, _ in layers:
            firsts.setdefault(sig, (op, dev, sig))
        return _Plan(len(self._plans), lp.tensors, layers, tuple(sig for _, _, sig, _ in layers),
                     tuple(firsts.values()))

    def _intern(self, tl):
        """The first tiling met with the value of ``tl`` (``_tiling_value``), else ``tl``."""
        return self._interned.setdefault(_tiling_value(tl), tl)

    def _geometry(self, cfg: HwConfig) -> _Geometry:
        key = _geometry_key(cfg)
        g = self._geometries.get(key)
        if g is None:
            g = self._geometries[key] = self._build(cfg)
        return g

    def _conv_tiling(self, op, dev, sig: int, lays: dict, cfg: HwConfig, group: int, prices: dict):
        """The interned tiling of a conv-tiled op (``DeviceOp.conv_shape``) of signature ``sig`` on
        ``cfg`` (of ``_timing_group`` number ``group``; ``prices``: this config's ``conv_price``s met
        so far, by (fused pool, no weight batch)): the conv tiler's stored pick for its candidate
        table and price (``tiling.known_pick``), the one tiling per pick's choice and resident
        tiles (the fields the work hooks read, ``ConvTiling.WORK_FIELDS``); ``tile`` where no pick
        is stored (it searches, or raises). ``conv_candidates_key`` reads no DDR timing or clock, so
        it is kept per signature and timing group; the price reads only those and the DMA fields,
        so it is worked out once per config."""
        key = self._conv_keys.get((sig, group))
        if key is None:
            shape = self._conv_shapes.get(sig)
            if shape is None:
                shape = self._conv_shapes[sig] = dev.conv_shape(op, lays)
            kernel, strides, cin, cout, oh, ow, skip, pool = shape
            key = self._conv_keys[(sig, group)] = conv_candidates_key(kernel, strides, cin, cout, oh, ow, cfg, skip,
                                                                      pool)
        kind = (key[17] is not None, key[19])       # (a fused pool, no weight batch: ``conv_price``'s)
        pb = prices.get(kind)
        if pb is None:
            pb = prices[kind] = conv_price(cfg, *kind)
        pick = known_pick(key, *pb)
        if pick is None:
            return self._intern(dev.tile(op, lays, cfg))
        choice, nres = pick[3], pick[2]
        got = self._pick_tilings.get((id(choice), nres))
        if got is None or got[0] is not choice:
            got = self._pick_tilings[(id(choice), nres)] = (choice, self._intern(conv_tiling(pick)))
        return got[1]

    def _build(self, cfg: HwConfig) -> _Geometry:
        plan = self._plan(cfg)
        lays, tilings, works, intern = plan.lays, self._tilings, self._works, self._intern
        group = self._groups.setdefault(_timing_group(cfg), len(self._groups))
        prices: dict = {}                  # (fused pool, no weight batch) -> conv_price on cfg
        by_sig = {}                        # signature number -> its work record
        for op, dev, sig in plan.distinct:
            if dev.conv_shape is not None:
                tl = self._conv_tiling(op, dev, sig, lays, cfg, group, prices)
            else:
                tl = tilings.get(sig, cfg, lambda c: intern(dev.tile(op, lays, c)))
            hook = dev.work or generic_work
            by_sig[sig] = works.get((sig, id(tl)), cfg, lambda c: hook(op, lays, tl, c))
        key = (plan.index, tuple(map(id, by_sig.values())))     # (each signature's, in the plan's order)
        g = self._by_works.get(key)
        if g is None:
            with_work = [(op, by_sig[sig], macs) for (op, _, sig, macs) in plan.layers]
            views = (plan.index, tuple(sig for sig, w in by_sig.items() if w is None))
            after = self._after.get(views)
            if after is None:
                after = self._after[views] = last_producers([(op, w is not None) for op, w, _ in with_work])
            g = self._by_works[key] = _Geometry([(op.name, type(op).__name__, w, macs) for op, w, macs in with_work
                                                 if w is not None], self._flats, after)
        return g

    def estimate(self, cfg: HwConfig) -> Estimate:
        """The Estimate of the graph on ``cfg``; CompileError naming the op if it does not fit."""
        g, point = self._point(cfg)
        return g.evaluate(*point)

    def _point(self, cfg: HwConfig) -> tuple:
        """(its _Geometry, its point for ``_Geometry.evaluate_many``: (cfg, DmaTiming, core ps, prices))."""
        dt = self._timings.get((), cfg, DmaTiming)
        return self._geometry(cfg), (cfg, dt, dt.core.period_ps, _prices(cfg))

    def estimate_many(self, cfgs: list) -> list:
        """``estimate`` of each config (its Estimate, or the CompileError it raises), in order:
        the configs that differ only in DDR timing and clocks (``_timing_group``) one group after
        another, the conv tiler weighing each candidate table at all of a group's prices at once
        (``tiling.prices_ahead``), then the group's configs of one geometry evaluated together
        (``_Geometry.evaluate_many``). The same results as one ``estimate`` at a time. The garbage
        collector is paused meanwhile (the estimator makes no reference cycles worth collecting
        mid-run; its scans of the many small objects a build allocates cost 5 to 9 % of the
        1,512-point grid's time)."""
        groups: dict = {}
        met: dict = {}                     # id(config) -> its group (a config met again: one of a cycled list)
        for n, cfg in enumerate(cfgs):
            g = met.get(id(cfg))
            if g is None:
                g = met[id(cfg)] = _timing_group(cfg)
            groups.setdefault(g, []).append(n)
        out: list = [None] * len(cfgs)
        collecting = gc.isenabled()
        gc.disable()
        try:
            for members in groups.values():
                # one config per DDR timing and clocks: the prices read nothing else the group's
                # configs differ in (``_TIMING_ONLY``: no tiler reads them)
                with prices_ahead(list({_TIMING_FIELDS(cfgs[n]): cfgs[n] for n in members}.values())):
                    points: dict = {}      # id(geometry) -> (geometry, [(index, point)])
                    for n in members:
                        try:
                            g, p = self._point(cfgs[n])
                        except CompileError as e:
                            out[n] = e.with_traceback(None)
                            continue
                        points.setdefault(id(g), (g, []))[1].append((n, p))
                for g, todo in points.values():
                    for (n, _), e in zip(todo, g.evaluate_many([p for _, p in todo])):
                        out[n] = e
        finally:
            if collecting:
                gc.enable()
        return out


def estimate(qg: QGraph, cfg: HwConfig) -> Estimate:
    """One-off ``Estimator(qg).estimate(cfg)``."""
    return Estimator(qg).estimate(cfg)


__all__ = ["Estimate", "Estimator", "LayerEstimate", "estimate", "last_producers", "BOUNDS", "ISSUE_CYCLES"]
