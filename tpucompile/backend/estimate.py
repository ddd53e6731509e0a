"""The compiler's fast cost model: estimated cycles, DDR bytes and MACs of a QGraph on a hardware
configuration, per layer, without emitting or simulating a program (architecture sweeps rank
thousands of candidate chips with it; tpusim.flow.sweep checks it against the SimPy model).

How a layer is estimated:
  1. the back end's own ``host_transforms``, ``layout`` and ``tiling`` decisions (the tiling of a
     layer is cached by the op and the configuration fields the tilers read, so a sweep over DMA
     depth, clocks or DDR latency re-tiles only when the tilers' inputs change);
  2. each op's ``work`` hook (``ops.registry.DeviceOp.work``; ``generic_work`` for ops without
     one) turns the tiling into a ``LayerWork``: DMA instructions (count x bursts), MXU and VPU
     busy cycles, tiles;
  3. ``layer_cycles``: DMA instructions are timed by ``tpusim.arch.dma_timing`` (the burst
     recurrences of docs/architecture.md on an idle chip); the engines of a layer overlap (tiles
     are double-buffered), so the layer takes the busiest of LOAD, STORE, the shared DDR bus, MXU
     and VPU, plus the pipeline's fill (the first tile's loads) and drain (the last tile's
     compute and store). Layers follow each other (no cross-layer overlap).

Units: cycles are core cycles, bytes are DDR bytes. Errors: CompileError naming the op, as the
back end raises it (a layer that does not fit the SRAM of the configuration).
"""
from __future__ import annotations

from dataclasses import dataclass

from tpucompile.backend import pipeline
from tpucompile.backend.work import LayerWork, generic_work
from tpucompile.ops import OP_TABLE
from tpucompile.qgraph import QGraph
from tpusim.arch.config import HwConfig
from tpusim.arch.dma_timing import dma_timing
from tpusim.arch.timebase import Timebase

#: core cycles an engine spends between instructions (dispatch, token hand-over)
ISSUE_CYCLES = 2


@dataclass(frozen=True)
class LayerEstimate:
    """One layer's estimate: core cycles, DDR bytes, MACs, the engine that bounds it, and the
    dynamic energy (uJ) of its events at ``cfg.energy`` (tpusim.arch.costs)."""
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
    """A whole graph's estimate (sums of its layers)."""
    config: str
    layers: tuple

    @property
    def cycles(self) -> int:
        return int(round(sum(L.cycles for L in self.layers)))

    @property
    def ddr_bytes(self) -> int:
        return sum(L.load_bytes + L.store_bytes for L in self.layers)

    @property
    def macs(self) -> int:
        return sum(L.macs for L in self.layers)

    @property
    def energy_uj(self) -> float:
        return sum(L.energy_uj for L in self.layers)


def layer_cycles(w: LayerWork, cfg: HwConfig) -> tuple[float, str]:
    """(core cycles, bounding engine) of one layer's work (module docstring, step 3)."""
    dt = dma_timing(cfg)
    core_ps = Timebase(cfg).core.period_ps
    dma_cycles = dt.dma.period_ps / core_ps
    load = sum(n * (dt.load_ps(b) / core_ps + dma_cycles) for n, b in w.loads)
    store = sum(n * (dt.store_ps(b) / core_ps + dma_cycles) for n, b in w.stores)
    bursts = sum(n * b for n, b in w.loads) + sum(n * b for n, b in w.stores)
    bus = bursts * dt.bus_burst_ps / core_ps
    mxu = w.mxu_cycles + ISSUE_CYCLES * w.mxu_instrs
    vpu = w.vpu_cycles + ISSUE_CYCLES * w.vpu_instrs
    load_bus = sum(n * b for n, b in w.loads) * dt.bus_burst_ps / core_ps
    store_bus = bus - load_bus
    # the channels share the DDR command bus: a request that finds the other channel's burst on
    # the bus waits for the rest of it, on average half a burst (deterministic service time)
    load, store = load + store_bus / 2, store + load_bus / 2
    busy = {"load": load, "store": store, "ddr": bus, "mxu": mxu, "vpu": vpu}
    if w.serial:
        return load + mxu + vpu + store, "serial"
    bound = max(busy, key=busy.get)
    fill = sum(dt.load_ps(b) / core_ps for b in w.fill_bursts)
    drain = w.drain_cycles + sum(dt.store_ps(b) / core_ps for b in w.drain_bursts)
    return busy[bound] + fill + drain, bound


def layer_energy_uj(w: LayerWork, macs: int, cfg: HwConfig) -> float:
    """Dynamic energy (uJ) of a layer's events: MACs, SRAM bytes (the DMA's writes and reads and
    the engines' accesses), accumulator elements and DDR bytes, priced by ``cfg.energy``."""
    e = cfg.energy
    ddr = w.load_bytes + w.store_bytes
    sram_bytes = ddr + w.sram_words * cfg.word_bytes
    pj = (macs * e.mac_pj + sram_bytes * cfg.sram_pj_per_byte + w.acc_accesses * e.acc_pj_per_access
          + ddr * e.ddr_pj_per_byte)
    return pj * 1e-6


def _tiling_key(op, lays: dict, cfg: HwConfig) -> tuple:
    """What a tiling depends on: the op, the layouts it touches, and the configuration without
    the fields no tiler reads (DMA depth, the cost tables)."""
    names = tuple(dict.fromkeys((*op.inputs, op.out)))
    shapes = tuple((n, lays[n].shape, lays[n].blk, lays[n].Hp, lays[n].Wp) for n in names if n in lays)
    c = cfg.to_dict()
    for k in ("name", "dma_outstanding", "energy", "area"):
        c.pop(k, None)
    return type(op).__name__, op.name, shapes, repr(sorted(c.items()))


class Estimator:
    """Estimates of one QGraph on many configurations; tilings are cached between them."""

    def __init__(self, qg: QGraph) -> None:
        qg.validate()
        self.qg = qg
        self._tilings: dict = {}

    def _tile(self, op, lays, cfg):
        key = _tiling_key(op, lays, cfg)
        tl = self._tilings.get(key)
        if tl is None:
            tl = self._tilings[key] = OP_TABLE.device(op).tile(op, lays, cfg)
        return tl

    def estimate(self, cfg: HwConfig) -> Estimate:
        """The Estimate of the graph on ``cfg``; CompileError naming the op if it does not fit."""
        dg = pipeline.host_transforms(pipeline.DeviceGraph(self.qg, cfg, pipeline.BackendOptions()))
        lp = pipeline.layout(dg)
        qg, lays, logical = lp.qg, lp.tensors, dg.qg
        rows = []
        for op, orig in zip(qg.ops, logical.ops):
            dev = OP_TABLE.device(op)
            tl = self._tile(op, lays, cfg)
            hook = dev.work or generic_work
            w = hook(op, lays, tl, cfg)
            if w is None:            # a view: no instruction
                continue
            cyc, bound = layer_cycles(w, cfg)
            macs = int(dev.macs(orig, logical))
            rows.append(LayerEstimate(op.name, type(op).__name__, cyc, w.load_bytes, w.store_bytes,
                                      macs, bound, layer_energy_uj(w, macs, cfg)))
        return Estimate(cfg.name, tuple(rows))


def estimate(qg: QGraph, cfg: HwConfig) -> Estimate:
    """One-off ``Estimator(qg).estimate(cfg)``."""
    return Estimator(qg).estimate(cfg)


__all__ = ["Estimate", "Estimator", "LayerEstimate", "estimate", "layer_cycles", "layer_energy_uj", "ISSUE_CYCLES"]
