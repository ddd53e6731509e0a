"""DMA engine (DMA clock, 400 MHz seed): LOAD channel (DDR -> SRAM), STORE channel (SRAM -> DDR).

Address generation (docs/architecture.md, "DMA"): ``count2 x count1`` runs of ``inner_bytes``;
run ``(o2, o1)`` (o2 outer) starts at DDR ``ddr_addr + o2*ddr_stride2 + o1*ddr_stride1`` and
SRAM ``sram_addr + o2*sram_stride2 + o1*sram_stride1``; each run is split into bursts at
``BB``-aligned DDR boundaries. A burst of ``n`` bytes is one DDR transaction and one SRAM
transaction of ``D = n / W`` accesses whose bank mask covers its SRAM range.

Burst timing, strictly one burst after another, ``r_0 = s``:
  LOAD : DDR read request at r_j -> grant g_j, done_j = g_j + L + B_j - 1;
         d_j = cdc(done_j -> dma): SRAM write request -> grant w_j, completion w_j + D_j;
         f_j = cdc(w_j + D_j -> dma); r_{j+1} = f_j; c = f_last.
  STORE: SRAM read request at r_j -> grant w_j; d_j = cdc(w_j + D_j -> dma): DDR write request
         -> grant g_j; f_j = cdc(g_j + L + B_j - 1 -> dma); r_{j+1} = f_j; c = f_last.
Functionally the burst's bytes are read from the source when its source transaction is granted
and written to the destination when its destination transaction is granted (within [s, c]).
Device errors: zero counts/length, misalignment, SRAM range past the end, DDR address >= 2^40.
"""
from __future__ import annotations

from tpusim.isa import Engine
from tpusim.models import ddr_arbiter, sram as sram_mod
from tpusim.models.common import QueueEntry, device_error
from tpusim.models.ddr import ADDR_LIMIT
from tpusim.models.engine import EngineBase


def plan_bursts(entry: QueueEntry, cfg) -> list[tuple[int, int, int]]:
    """Validate a DMA instruction and list its bursts as (ddr_byte_addr, sram_byte_addr, bytes),
    in issue order. Raises SimulationError naming the field on any illegal value."""
    a = entry.instr.args
    w = cfg.word_bytes
    bb = cfg.dma_burst_bytes
    ddr_align = w if w >= 32 else 32
    for f in ("inner_bytes", "count1", "count2"):
        if a[f] == 0:
            raise device_error(entry, f, 0, "is zero: zero-length DMA")
    for f in ("sram_addr", "inner_bytes", "sram_stride1", "sram_stride2"):
        if a[f] % w:
            raise device_error(entry, f, a[f], f"is not a multiple of the {w}-byte SRAM word")
    for f in ("ddr_addr", "ddr_stride1", "ddr_stride2"):
        if a[f] % ddr_align:
            raise device_error(entry, f, a[f], f"is not a multiple of {ddr_align} bytes")
    c1, c2, inner = a["count1"], a["count2"], a["inner_bytes"]
    sram_end = a["sram_addr"] + (c2 - 1) * a["sram_stride2"] + (c1 - 1) * a["sram_stride1"] + inner
    if sram_end > cfg.sram_size_bytes:
        raise device_error(entry, "sram_addr", a["sram_addr"],
                           f"with these strides reaches SRAM byte {sram_end - 1:#x}, past the "
                           f"end of the {cfg.sram_size_bytes}-byte SRAM")
    ddr_end = a["ddr_addr"] + (c2 - 1) * a["ddr_stride2"] + (c1 - 1) * a["ddr_stride1"] + inner
    if ddr_end > ADDR_LIMIT:
        raise device_error(entry, "ddr_addr", a["ddr_addr"],
                           f"with these strides reaches DDR byte {ddr_end - 1:#x} >= 2^40")
    bursts = []
    for o2 in range(c2):
        for o1 in range(c1):
            d = a["ddr_addr"] + o2 * a["ddr_stride2"] + o1 * a["ddr_stride1"]
            s = a["sram_addr"] + o2 * a["sram_stride2"] + o1 * a["sram_stride1"]
            left = inner
            while left:
                n = min(left, bb - d % bb)
                bursts.append((d, s, n))
                d, s, left = d + n, s + n, left - n
    return bursts


class DmaChannel(EngineBase):
    """LOAD (engine 0) or STORE (engine 1) channel; see the module docstring for the timing."""

    def __init__(self, env, clocks, engine, queue, tokens, perf, retire_log, *, cfg, ddr_arb,
                 sram, ddr_mem, trace=None) -> None:
        super().__init__(env, clocks, engine, queue, tokens, perf, retire_log, trace)
        self.cfg = cfg
        self.ddr_arb = ddr_arb
        self.sram = sram
        self.ddr_mem = ddr_mem
        self.is_load = engine == Engine.LOAD
        self.w = cfg.word_bytes
        self.core_period = clocks.core.period_ps

    def execute(self, entry: QueueEntry, s_ps: int):
        expect = "DMA_LOAD" if self.is_load else "DMA_STORE"
        if entry.instr.op != expect:
            raise device_error(entry, "opcode", entry.instr.spec.code, f"cannot run on {self.name}")
        self._bursts = plan_bursts(entry, self.cfg)
        self._j = 0
        self._finished = self.env.event()
        self._launch(s_ps)                      # r_0 = s
        c_ps = yield self._finished             # value f_last; fires at the last grant
        yield self.env.timeout(c_ps - self.env.now)
        return c_ps

    # The burst sequence runs as grant callbacks of the two arbiters (no process switch per
    # burst); each step below is one numbered rule of the module docstring.
    def _launch(self, r_ps: int) -> None:
        """Step 1: launch burst j at DMA edge r_j (or finish: c = f_last = r_ps)."""
        if self._j == len(self._bursts):
            self._finished.succeed(r_ps)
            return
        ddr_addr, sram_addr, n = self._bursts[self._j]
        if self.is_load:
            self.ddr_arb.request(ddr_arbiter.DMA_READ, r_ps, self.dom, ddr_addr, n,
                                 on_grant=self._load_ddr_granted)
        else:
            self.sram.request(sram_mod.STORE, r_ps, self.dom, self._sram_range(sram_addr, n),
                              self._accesses(n), on_grant=self._store_sram_granted)

    def _load_ddr_granted(self, g_ps: int, done_ps: int) -> None:
        """LOAD steps 2-3: read granted at g, done = g + L + B - 1; at d = cdc(done -> dma)
        launch the SRAM write request."""
        ddr_addr, sram_addr, n = self._bursts[self._j]
        self._data = self.ddr_mem.read(ddr_addr, n)
        d_ps = self.clocks.cdc(done_ps, self.clocks.ddr, self.dom)
        self.sram.request(sram_mod.LOAD, d_ps, self.dom, self._sram_range(sram_addr, n),
                          self._accesses(n), on_grant=self._load_sram_granted)

    def _load_sram_granted(self, w_ps: int) -> None:
        """LOAD steps 4-5: SRAM write granted at w, completes w + D; f = cdc(w + D -> dma)."""
        _, sram_addr, n = self._bursts[self._j]
        self.sram.write_bytes(sram_addr, self._data)
        c = self.clocks
        f_ps = c.cdc(w_ps + self._accesses(n) * self.core_period, c.core, self.dom)
        self._j += 1
        self._launch(f_ps)                      # r_{j+1} = f_j

    def _store_sram_granted(self, w_ps: int) -> None:
        """STORE: SRAM read granted at w; at d = cdc(w + D -> dma) launch the DDR write."""
        ddr_addr, sram_addr, n = self._bursts[self._j]
        self._data = self.sram.read_bytes(sram_addr, n)
        c = self.clocks
        d_ps = c.cdc(w_ps + self._accesses(n) * self.core_period, c.core, self.dom)
        self.ddr_arb.request(ddr_arbiter.DMA_WRITE, d_ps, self.dom, ddr_addr, n,
                             on_grant=self._store_ddr_granted)

    def _store_ddr_granted(self, g_ps: int, done_ps: int) -> None:
        """STORE: DDR write granted at g; f = cdc(g + L + B - 1 -> dma)."""
        self.ddr_mem.write(self._bursts[self._j][0], self._data)
        f_ps = self.clocks.cdc(done_ps, self.clocks.ddr, self.dom)
        self._j += 1
        self._launch(f_ps)                      # r_{j+1} = f_j

    def _sram_range(self, sram_addr: int, n: int) -> list[tuple[int, int]]:
        return [(sram_addr // self.w, (sram_addr + n - 1) // self.w)]

    def _accesses(self, n: int) -> int:
        return -(-n // self.w)       # D = n / W (n is a multiple of W when W <= BB)


__all__ = ["DmaChannel", "plan_bursts"]
