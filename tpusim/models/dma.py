"""DMA engine (DMA clock, 400 MHz seed): LOAD channel (DDR -> SRAM), STORE channel (SRAM -> DDR).

Address generation (docs/architecture.md, "DMA"): ``count2 x count1`` runs of ``inner_bytes``;
run ``(o2, o1)`` (o2 outer) starts at DDR ``ddr_addr + o2*ddr_stride2 + o1*ddr_stride1`` and
SRAM ``sram_addr + o2*sram_stride2 + o1*sram_stride1``; each run is split into bursts at
``BB``-aligned DDR boundaries. A burst of ``n`` bytes is one DDR transaction and one SRAM
transaction of ``D = n / W`` accesses whose bank mask covers its SRAM range.

Burst timing (spec v2), ``K = dma.outstanding`` burst buffers per channel, burst ``j`` uses
buffer ``j mod K``; all times DMA edges unless named; ``f_{j-K}`` is taken as ``s`` for ``j < K``:
  LOAD : DDR read request at r_0 = s, r_j = max(r_{j-1} + 1, f_{j-K});
         grant g_j, done_j = g_j + L + B_j - 1, d_j = cdc(done_j -> dma);
         SRAM write request at e_j = max(d_j, e_{j-1} + 1) (e_0 = d_0), queued in the core
         domain: visible at max(cdc(e_j -> core), w_{j-1} + D_{j-1} + 1) -> grant w_j;
         f_j = cdc(w_j + D_j -> dma) frees the buffer; c = f_{N-1}.
  STORE: SRAM read request at r_0 = s, r_j = max(d_{j-1}, f_{j-K}) -> grant w_j;
         d_j = cdc(w_j + D_j -> dma): DDR write request -> grant g_j;
         f_j = cdc(g_j + L + B_j - 1 -> dma) frees the buffer; c = f_{N-1}.
With K = 1 both reduce to one burst at a time (v1).
Instructions overlap (v4): up to DMA_MAX_INFLIGHT (tpusim.arch.limits) per channel. Burst
numbers j and the K buffers continue across instructions (one ring); the channel is free at
f = r_{N-1} + 1 (one edge after its last A launch: LOAD DDR read, STORE SRAM read), and the
next instruction starts at s >= f + 1 once its first burst j may launch at s (wait_head_ready:
f_{j-K} <= s, STORE also d_{j-1} <= s): r_j = s. Each instruction completes at
c = max(f_{N-1}, c_prev + 1) (in order). The lists below are indexed by j since the channel was
last idle (no instruction in flight).
Functionally the burst's bytes are read from the source when its source transaction is granted
and written to the destination when its destination transaction is granted (within [s, c]).
Device errors (checked at the start edge s, plan_bursts): zero counts/length, misalignment, SRAM
range past the end, DDR range past 2^40; such an instruction starts only with none in flight
(starts_alone) and completes at s + 1 (engine.py).
"""
from __future__ import annotations

from collections import deque

from tpusim.arch.device_checks import dma_fault
from tpusim.arch.errors import SimulationError
from tpusim.arch.isa import Engine
from tpusim.arch.limits import DMA_MAX_INFLIGHT
from tpusim.arch.operands import dma_runs
from tpusim.models import ddr_arbiter
from tpusim.models import sram as sram_mod
from tpusim.models.common import QueueEntry, raise_fault
from tpusim.models.engine import EngineBase
from tpusim.models.trace import DDR_KIND, SRAM_KIND

#: (trace digests) edges after its grant at which the probe counts an SRAM write's first word /
#: a DDR write's first beat
SRAM_WRITE_EDGE = 1
DDR_WRITE_EDGE = 1


def plan_bursts(entry: QueueEntry, cfg) -> list[tuple[int, int, int]]:
    """Check a DMA instruction (tpusim.arch.device_checks.dma_fault) and list its bursts as
    (ddr_byte_addr, sram_byte_addr, bytes), in issue order. Raises DeviceError (dma_zero_length,
    dma_misaligned, dma_sram_range, dma_ddr_range, checked in that order) naming the field and
    its value."""
    raise_fault(entry, dma_fault(entry.instr.args, cfg))
    bb = cfg.dma_burst_bytes
    bursts: list[tuple[int, int, int]] = []
    for d, s, left in dma_runs(entry.instr.args):
        head = min(left, bb - d % bb)              # up to the first BB boundary
        bursts.append((d, s, head))
        d, s, left = d + head, s + head, left - head
        whole, tail = divmod(left, bb)             # then whole bursts, then the rest
        bursts += [(d + i, s + i, bb) for i in range(0, whole * bb, bb)]
        if tail:
            bursts.append((d + whole * bb, s + whole * bb, tail))
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
        self.k = cfg.dma_outstanding
        self.max_inflight = DMA_MAX_INFLIGHT
        self._reset()
        self._want: tuple | None = None  # (list, length, event): event fires once len(list) >= length
        self._last_c = -1                # completion edge of the last instruction completed
        if self.is_load:
            self._ddr_rid, self._sram_rid = ddr_arbiter.DMA_READ, sram_mod.LOAD
            self._on_ddr, self._on_sram = self._load_ddr_granted, self._load_sram_granted
        else:
            self._ddr_rid, self._sram_rid = ddr_arbiter.DMA_WRITE, sram_mod.STORE
            self._on_ddr, self._on_sram = self._store_ddr_granted, self._store_sram_granted

    def _reset(self) -> None:
        """Start the burst lists afresh (the channel is idle: every burst of it completed)."""
        self._bursts: list[tuple[int, int, int]] = []   # of the instructions started
        self._s = 0                      # start edge of the last instruction started
        self._j0 = 0                     # its first burst
        # Per-burst edges (ps), filled as the grants happen. ``_data[j]`` holds burst j's bytes
        # between its source and destination grants (the burst buffer j mod K).
        self._r: list[int] = []          # LOAD: DDR read launches; STORE: SRAM read launches
        self._d: list[int] = []          # LOAD: cdc(done_j); STORE: cdc(w_j + D_j)
        self._f: list[int] = []          # buffer j free (seen in the DMA domain)
        self._data: list[bytes | None] = []
        self._sram_posted = 0            # SRAM requests posted so far (one at a time)
        self._e_ps = 0                   # LOAD: e_{j-1}, the last SRAM write launch
        self._port_ps = 0                # LOAD: w_{j-1} + D_{j-1} + 1 core cycles (port free)
        self._recs: deque = deque()      # in flight, oldest first: (end burst, completion event)
        self._end = -1                   # the oldest's end burst (completes at f_{end-1})

    def starts_alone(self, entry: QueueEntry) -> bool:
        """A NOP or an instruction failing its device checks starts with none in flight."""
        return entry.instr.op == "NOP" or dma_fault(entry.instr.args, self.cfg) is not None

    def wait_head_ready(self, entry: QueueEntry):
        """The next burst j (the head's first) launches at its start s: f_{j-K} <= s, and for
        STORE d_{j-1} <= s (the previous SRAM read seen done); waits until they are known."""
        j = len(self._bursts)
        ready = 0
        if j >= self.k:
            yield from self._wait_len(self._f, j - self.k + 1)
            ready = self._f[j - self.k]
        if not self.is_load and j:
            yield from self._wait_len(self._d, j)
            ready = max(ready, self._d[j - 1])
        return ready

    def _wait_len(self, lst: list, n: int):
        """Wait until ``len(lst) >= n`` (a grant step appends; _poke fires the event)."""
        if len(lst) < n:
            ev = self.env.event()
            self._want = (lst, n, ev)
            self.waiting_for = "its burst buffers"
            yield ev
            self.waiting_for = None

    def _poke(self) -> bool:
        """Fire the wanted event if its list is long enough (True then)."""
        w = self._want
        if w is not None and len(w[0]) >= w[1]:
            self._want = None
            w[2].succeed()
            return True
        return False

    def _complete(self, f_ps: int) -> None:
        """The oldest instruction's last burst is done at f_ps: it completes at
        c = max(f_ps, c_prev + 1)."""
        end, ev = self._recs.popleft()
        c_ps = max(f_ps, self._last_c + self.period)
        self._last_c = c_ps
        self._end = self._recs[0][0] if self._recs else -1
        ev.succeed(c_ps)

    def execute(self, entry: QueueEntry, s_ps: int):
        expect = "DMA_LOAD" if self.is_load else "DMA_STORE"
        if entry.instr.op != expect:
            raise SimulationError(f"{entry.where()}: cannot run on {self.name}")
        bursts = plan_bursts(entry, self.cfg)
        if not self._recs and self._last_c < s_ps:    # idle (a completion may be known early)
            self._reset()
        self._j0 = len(self._bursts)
        self._s = s_ps
        self._bursts += bursts
        done = self.env.event()             # value c; fires at the grant fixing it
        self._recs.append((len(self._bursts), done))
        if len(self._recs) == 1:
            self._end = len(self._bursts)
        if self.is_load:
            self._load_launch_ddr()
        else:
            self._store_launch_sram()
        yield from self._wait_len(self._r, len(self._bursts))  # every burst's A launched
        f_ps = self._r[-1] + self.period                        # the free edge
        yield self.env.timeout(f_ps - self.env.now)
        return done

    # The burst sequences run as grant callbacks of the two arbiters (no process switch per
    # burst); every launch is posted as soon as all the edges it depends on are known.
    def _post_ddr(self, launch_ps: int, ddr_addr: int, nbytes: int) -> None:
        """Post this channel's DDR request."""
        self.ddr_arb.request(self._ddr_rid, launch_ps, self.dom, ddr_addr, nbytes, self._on_ddr)

    def _post_sram(self, launch_ps: int, sram_addr: int, nbytes: int, port_free_ps: int = 0) -> None:
        """Post this channel's SRAM request (visible no earlier than ``port_free_ps``)."""
        self.sram.request_banks(self._sram_rid, launch_ps, self.dom, self._banks(sram_addr, nbytes),
                                self._accesses(nbytes), self._on_sram, port_free_ps)

    def _banks(self, sram_addr: int, nbytes: int) -> tuple[int, ...]:
        """Bank mask of a burst (ranges_to_banks of its one word range)."""
        bank_bytes = self.sram.bank_words * self.w
        return tuple(range(sram_addr // bank_bytes, (sram_addr + nbytes - 1) // bank_bytes + 1))

    def _buffer_free_ps(self, j: int) -> int | None:
        """``f_{j-K}`` (``s`` for ``j < K`` since idle), or None if not known yet."""
        i = j - self.k
        if i < 0:
            return self._s
        return self._f[i] if i < len(self._f) else None

    # ------------------------------------------------------------------ LOAD
    def _load_launch_ddr(self) -> None:
        """Step 1: post every DDR read whose buffer is known free: r_j = max(r_{j-1}+1, f_{j-K})."""
        r, n = self._r, len(self._bursts)
        while len(r) < n:
            j = len(r)
            free = self._buffer_free_ps(j)
            if free is None:
                return
            r_ps = self._s if j == self._j0 else max(r[-1] + self.period, free)
            r.append(r_ps)
            self._data.append(None)
            ddr_addr, _, nb = self._bursts[j]
            self._post_ddr(r_ps, ddr_addr, nb)

    def _load_ddr_granted(self, g_ps: int, done_ps: int) -> None:
        """Step 2: read j granted at g (in order), done = g + L + B - 1, d_j = cdc(done -> dma)."""
        j = len(self._d)
        self._data[j] = self.ddr_mem.read(self._bursts[j][0], self._bursts[j][2])
        self._d.append(self.clocks.cdc(done_ps, self.clocks.ddr, self.dom))
        if self.trace is not None:
            self.trace.dma_seen(self.engine, "a", self._d[-1])
        self._load_launch_sram()
        self._poke()

    def _load_launch_sram(self) -> None:
        """Step 3: SRAM write j launched at e_j = max(d_j, e_{j-1} + 1), visible in the core
        domain at max(cdc(e_j), w_{j-1} + D_{j-1} + 1); posted once d_j and w_{j-1} are known."""
        j = self._sram_posted
        if j >= len(self._d) or j > len(self._f):
            return
        e_ps = self._d[j] if j == 0 else max(self._d[j], self._e_ps + self.period)
        self._e_ps = e_ps
        self._sram_posted = j + 1
        _, sram_addr, n = self._bursts[j]
        self._post_sram(e_ps, sram_addr, n, self._port_ps if j else 0)

    def _load_sram_granted(self, w_ps: int) -> None:
        """Step 4: SRAM write j granted at w, completes w + D; f_j = cdc(w + D -> dma)."""
        j = len(self._f)
        _, sram_addr, n = self._bursts[j]
        self.sram.write_bytes(sram_addr, self._data[j])
        if self.trace is not None:      # word i written at core edge w + i + 1
            self.trace.wrote_timed(self.engine, SRAM_KIND, sram_addr, self._data[j],
                                   w_ps + SRAM_WRITE_EDGE * self.core_period, self.core_period, self.w)
        self._data[j] = None
        c = self.clocks
        f_ps = c.cdc(w_ps + self._accesses(n) * self.core_period, c.core, self.dom)
        self._port_ps = w_ps + (self._accesses(n) + 1) * self.core_period
        self._f.append(f_ps)
        if self.trace is not None:
            self.trace.dma_seen(self.engine, "b", f_ps)
        if j + 1 == self._end:
            self._complete(f_ps)                 # c = max(f_{N-1}, c_prev + 1)
        self._load_launch_ddr()                  # buffer j mod K is free from f_j
        self._load_launch_sram()
        self._poke()

    # ------------------------------------------------------------------ STORE
    def _store_launch_sram(self) -> None:
        """Step 1: SRAM read j at r_j = max(d_{j-1}, f_{j-K}) once both are known."""
        j = self._sram_posted
        if j >= len(self._bursts) or j > len(self._d):
            return
        free = self._buffer_free_ps(j)
        if free is None:
            return
        r_ps = self._s if j == self._j0 else max(self._d[j - 1], free)
        self._sram_posted = j + 1
        self._r.append(r_ps)
        self._data.append(None)
        _, sram_addr, n = self._bursts[j]
        self._post_sram(r_ps, sram_addr, n)

    def _store_sram_granted(self, w_ps: int) -> None:
        """Step 2: SRAM read j granted at w; at d_j = cdc(w + D -> dma) launch the DDR write."""
        j = len(self._d)
        ddr_addr, sram_addr, n = self._bursts[j]
        self._data[j] = self.sram.read_bytes(sram_addr, n)
        c = self.clocks
        d_ps = c.cdc(w_ps + self._accesses(n) * self.core_period, c.core, self.dom)
        self._d.append(d_ps)
        if self.trace is not None:
            self.trace.dma_seen(self.engine, "a", d_ps)
        self._post_ddr(d_ps, ddr_addr, n)
        self._store_launch_sram()
        self._poke()

    def _store_ddr_granted(self, g_ps: int, done_ps: int) -> None:
        """Step 3: DDR write j granted at g (in order); f_j = cdc(g + L + B - 1 -> dma)."""
        j = len(self._f)
        self.ddr_mem.write(self._bursts[j][0], self._data[j])
        if self.trace is not None:      # beat i written at DDR edge g + i + 1
            c = self.clocks
            self.trace.wrote_timed(self.engine, DDR_KIND, self._bursts[j][0], self._data[j],
                                   g_ps + DDR_WRITE_EDGE * c.ddr.period_ps, c.ddr.period_ps,
                                   self.cfg.ddr_beat_bytes)
        self._data[j] = None
        f_ps = self.clocks.cdc(done_ps, self.clocks.ddr, self.dom)
        self._f.append(f_ps)
        if self.trace is not None:
            self.trace.dma_seen(self.engine, "b", f_ps)
        if j + 1 == self._end:
            self._complete(f_ps)                 # c = max(f_{N-1}, c_prev + 1)
        self._store_launch_sram()                # buffer j mod K is free from f_j
        self._poke()

    def _accesses(self, n: int) -> int:
        return -(-n // self.w)       # D = n / W (n is a multiple of W when W <= BB)



__all__ = ["DmaChannel", "plan_bursts"]
