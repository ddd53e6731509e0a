"""The compiler's fast cost model: estimated cycles, DDR bytes and MACs of a QGraph on a hardware
configuration, per layer, without emitting or simulating a program (architecture sweeps rank
thousands of candidate chips with it; tpusim.flow.sweep checks it against the SimPy model).

How a layer is estimated:
  1. the back end's own ``host_transforms``, ``layout`` and ``tiling`` decisions (each cached on
     exactly the configuration attributes it read, ``cfgmemo.ReadMemo``, the tiling per layer
     shape: a sweep redoes a stage only when what that stage read changes);
  2. each op's ``work`` hook (``ops.registry.DeviceOp.work``; ``generic_work`` for ops without
     one) turns the tiling into a ``LayerWork``: DMA instructions (count x bursts), MXU and VPU
     busy cycles, tiles;
  3. the timing, for all layers at once (numpy): DMA instructions are timed by
     ``tpusim.arch.dma_timing`` (the burst recurrences of docs/architecture.md on an idle chip),
     and a request that finds the other channel's burst on the shared DDR bus waits for the
     rest of it, on average half a burst; the engines of a layer overlap (tiles are
     double-buffered), so the layer takes the busiest of LOAD, STORE, the DDR bus, MXU and VPU,
     plus the pipeline's fill (the first tile's loads) and drain (the last tile's compute and
     store); a tiling with one slot group runs its engines in turn. Layers follow each other
     (no cross-layer overlap).

Units: cycles are core cycles, bytes are DDR bytes. Errors: CompileError naming the op, as the
back end raises it (a layer that does not fit the SRAM of the configuration).
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass

import numpy as np

from tpucompile.backend import pipeline
from tpucompile.backend.cfgmemo import ReadMemo
from tpucompile.backend.work import generic_work
from tpucompile.ops import OP_TABLE
from tpucompile.qgraph import QGraph
from tpusim.arch.config import HwConfig
from tpusim.arch.dma_timing import DmaTiming

#: core cycles an engine spends between instructions (dispatch, token hand-over)
ISSUE_CYCLES = 2


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

    @property
    def cycles(self) -> int:
        return int(round(float(self.layer_cycles.sum())))

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
    bytes, event counts; the DMA instructions as (layer, bursts, count) triples."""

    def __init__(self, layers: list) -> None:
        self.names = tuple(n for n, _, _, _ in layers)
        self.kinds = tuple(k for _, k, _, _ in layers)
        works = [w for _, _, w, _ in layers]
        col = lambda f: np.array([f(w) for w in works], dtype=np.float64)   # noqa: E731
        self.macs = np.array([m for _, _, _, m in layers], dtype=np.float64)
        self.mxu = col(lambda w: w.mxu_cycles + ISSUE_CYCLES * w.mxu_instrs)
        self.vpu = col(lambda w: w.vpu_cycles + ISSUE_CYCLES * w.vpu_instrs)
        self.drain = col(lambda w: w.drain_cycles)
        self.serial = np.array([w.serial for w in works], dtype=bool)
        self.load_bytes, self.store_bytes = col(lambda w: w.load_bytes), col(lambda w: w.store_bytes)
        self.sram_words, self.acc = col(lambda w: w.sram_words), col(lambda w: w.acc_accesses)
        self.load_bursts = col(lambda w: w.totals()[0])
        self.store_bursts = col(lambda w: w.totals()[1])
        self.loads = self._triples([w.loads for w in works])
        self.stores = self._triples([w.stores for w in works])
        self.fill = self._triples([Counter(w.fill_bursts) for w in works])
        self.drain_stores = self._triples([Counter(w.drain_bursts) for w in works])
        self.exposed_loads = self._triples([w.exposed_loads for w in works])
        self.exposed_stores = self._triples([w.exposed_stores for w in works])
        self.exposed = col(lambda w: w.exposed_cycles)

    @staticmethod
    def _triples(per_layer: list) -> tuple:
        li, b, n = [], [], []
        for i, d in enumerate(per_layer):
            for bursts, count in d.items():
                li.append(i)
                b.append(bursts)
                n.append(count)
        return np.array(li, dtype=np.int64), np.array(b, dtype=np.int64), np.array(n, dtype=np.float64)

    def _time(self, triples, curve, nlayers: int) -> np.ndarray:
        li, b, n = triples
        if len(li) == 0:
            return np.zeros(nlayers)
        return np.bincount(li, weights=n * curve(b), minlength=nlayers)

    def evaluate(self, cfg: HwConfig, dt, core_ps: int, prices: tuple) -> Estimate:
        nl = len(self.names)
        dma_ps = float(dt.dma.period_ps)
        load = self._time(self.loads, lambda b: dt.load_ps_array(b) + dma_ps, nl) / core_ps
        store = self._time(self.stores, lambda b: dt.store_ps_array(b) + dma_ps, nl) / core_ps
        bus = dt.bus_burst_ps / core_ps
        load_bus, store_bus = self.load_bursts * bus, self.store_bursts * bus
        # a request that finds the other channel's burst on the bus (the share of the layer's
        # span that channel holds it) waits for the rest of it, on average half a burst
        span = np.maximum(np.maximum(load, store), np.maximum(self.mxu, self.vpu))
        span = np.maximum(span, 1.0)
        load, store = (load + load_bus * store_bus / (2 * span * bus) * bus,
                       store + store_bus * load_bus / (2 * span * bus) * bus)
        fill = self._time(self.fill, dt.load_ps_array, nl) / core_ps
        drain_store = self._time(self.drain_stores, dt.store_ps_array, nl) / core_ps
        drain = self.drain + drain_store
        # each engine's path through the layer: what must happen before it can start (the first
        # tile's loads), its own busy time, what follows its last instruction (the last tile)
        exposed = (self.exposed + (self._time(self.exposed_loads, dt.load_ps_array, nl)
                                   + self._time(self.exposed_stores, dt.store_ps_array, nl)) / core_ps)
        paths = np.stack([load + drain, fill + store, load_bus + store_bus,
                          fill + self.mxu + exposed + drain, fill + self.vpu + drain_store])
        bound = paths.argmax(axis=0)
        cycles = np.where(self.serial, load + store + self.mxu + self.vpu, paths.max(axis=0))
        bound = np.where(self.serial, len(BOUNDS) - 1, bound)
        mac_pj, sram_pj, acc_pj, ddr_pj, word_bytes = prices
        ddr = self.load_bytes + self.store_bytes
        energy = (self.macs * mac_pj + (ddr + self.sram_words * word_bytes) * sram_pj + self.acc * acc_pj
                  + ddr * ddr_pj) * 1e-6
        return Estimate(cfg.name, self.names, self.kinds, cycles, self.load_bytes, self.store_bytes, self.macs,
                        bound, energy)


def _prices(cfg: HwConfig) -> tuple:
    e = cfg.energy
    return e.mac_pj, cfg.sram_pj_per_byte, e.acc_pj_per_access, e.ddr_pj_per_byte, cfg.word_bytes


#: config fields that change neither a tiling nor a LayerWork (only the DMA timing or the costs)
_TIMING_ONLY = ("name", "dma_outstanding", "energy", "area")


def _geometry_key(cfg: HwConfig) -> tuple:
    """The config without the fields no tiler and no work hook reads."""
    return tuple(getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in _TIMING_ONLY)


#: op fields no tiler or work hook reads: the name and scalar quantization parameters
_UNTILED_FIELDS = frozenset(("name", "relu", "x_zp", "y_zp", "zp_a", "zp_b", "zp_out", "mult_a", "shift_a",
                             "mult_b", "shift_b", "mult_out", "shift_out", "conv_name", "conv_out", "add_name",
                             "skip_is_a", "add_relu"))


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
    tiler's own guess, which no work hook reads): two tilings with the same value give the same
    LayerWork. Its dicts and lists (slot addresses and sizes: ints, strings and tuples of them)
    are taken by their repr, which tells such values apart."""
    return (type(tl),) + tuple((k, repr(v) if type(v) in _CONTAINERS else v)
                               for k, v in vars(tl).items() if k != "est_cycles")


_CONTAINERS = (dict, list)


@dataclass(frozen=True)
class _Plan:
    """The device graph of one layout (``host_transforms`` and ``layout`` of the back end):
    ``index`` (the layout's number in this Estimator), ``lays`` (tensor -> ActLayout) and per op
    (device order) the op, its DeviceOp, the number of its tiling ``_signature`` (ops of one
    signature share a number) and its MACs."""
    index: int
    lays: dict
    layers: tuple


class Estimator:
    """Estimates of one QGraph on many configurations. Every stage is cached on exactly the
    config attributes it reads (``cfgmemo.ReadMemo``): the layout, each layer's tiling and work
    record (shared by the layers of the same ``_signature``; work records by the tiling's value),
    the arrays of a geometry (by its work records), the DMA timing; so a sweep redoes only what
    the knobs it turns can change, and whole configs differing only in DMA depth or cost tables
    share one geometry. Tilings are interned by value, so work records are keyed by identity."""

    def __init__(self, qg: QGraph) -> None:
        qg.validate()
        self.qg = qg
        self._plans, self._tilings, self._works = ReadMemo(), ReadMemo(), ReadMemo()
        self._timings = ReadMemo()
        self._interned: dict = {}          # _tiling_value -> the first tiling of that value
        self._by_works: dict = {}          # (layout, work records) -> _Geometry
        self._geometries: dict = {}        # _geometry_key -> _Geometry

    def _plan(self, cfg) -> _Plan:
        dg = pipeline.host_transforms(pipeline.DeviceGraph(self.qg, cfg, pipeline.BackendOptions()))
        lp = pipeline.layout(dg)
        sigs: dict = {}                    # signature -> its number in this layout
        layers = tuple((op, OP_TABLE.device(op), sigs.setdefault(_signature(op, lp.tensors), len(sigs)),
                        int(OP_TABLE.device(op).macs(orig, lp.graph.qg)))
                       for op, orig in zip(lp.qg.ops, lp.graph.qg.ops))
        return _Plan(len(self._plans), lp.tensors, layers)

    def _intern(self, tl):
        """The first tiling met with the value of ``tl`` (``_tiling_value``), else ``tl``."""
        return self._interned.setdefault(_tiling_value(tl), tl)

    def _geometry(self, cfg: HwConfig) -> _Geometry:
        key = _geometry_key(cfg)
        g = self._geometries.get(key)
        if g is None:
            g = self._geometries[key] = self._build(cfg)
        return g

    def _build(self, cfg: HwConfig) -> _Geometry:
        plan = self._plans.get((), cfg, self._plan)
        lays, by_sig = plan.lays, {}
        for op, dev, sig, _ in plan.layers:
            if sig in by_sig:
                continue
            tl = self._tilings.get((plan.index, sig), cfg, lambda c: self._intern(dev.tile(op, lays, c)))
            hook = dev.work or generic_work
            by_sig[sig] = self._works.get((plan.index, sig, id(tl)), cfg, lambda c: hook(op, lays, tl, c))
        works = [by_sig[sig] for _, _, sig, _ in plan.layers]
        key = (plan.index, tuple(map(id, works)))
        g = self._by_works.get(key)
        if g is None:
            g = self._by_works[key] = _Geometry([(op.name, type(op).__name__, w, macs)
                                                 for (op, _, _, macs), w in zip(plan.layers, works) if w is not None])
        return g

    def estimate(self, cfg: HwConfig) -> Estimate:
        """The Estimate of the graph on ``cfg``; CompileError naming the op if it does not fit."""
        dt = self._timings.get((), cfg, DmaTiming)
        return self._geometry(cfg).evaluate(cfg, dt, dt.core.period_ps, _prices(cfg))


def estimate(qg: QGraph, cfg: HwConfig) -> Estimate:
    """One-off ``Estimator(qg).estimate(cfg)``."""
    return Estimator(qg).estimate(cfg)


__all__ = ["Estimate", "Estimator", "LayerEstimate", "estimate", "BOUNDS", "ISSUE_CYCLES"]
