"""DMA burst trains: the two DMA channels' grants run in one tight loop (the SimPy model's hot path).

A DMA-bound network spends most of its simulation in the bursts of DMA_LOAD and DMA_STORE: per
burst one DDR grant and one SRAM grant, each followed by the channel's step (models/dma.py). When
the DMA channels are the only requesters with a request on both arbiters (no instruction fetch
queued, no MXU or VPU SRAM request pending: requesters 2 and up), :class:`DmaTrain` runs those grants itself, in time
order, up to SimPy's next event (the horizon of :class:`~tpusim.models.common.ArbiterLoop`:
nothing else can post a request visible by then). Each grant is the arbiter's decision at that
edge, with the same rules (DDR: bus free, round robin from the last granted requester; SRAM:
fixed priority LOAD before STORE, a grant takes its banks), and each step is the channel
callback's, inlined with the state in locals. The arbiters' loop offers the train every
decision before the arbiter takes it (``ArbiterLoop.train``); the arbiters wake again at the end
of a train, so the decisions past the horizon run as usual. Cycles, counters, grant log and data are the same as
with every decision on the arbiters (``make replay-check``).
"""
from __future__ import annotations

from tpusim.arch.ddr_memory import PAGE_BYTES
from tpusim.arch.timebase import CDC_EDGES
from tpusim.models.ddr_arbiter import DMA_READ, DMA_WRITE, FETCH, DdrRequest
from tpusim.models.sram import LOAD, MXU, STORE, SramRequest


class DmaTrain:
    """Runs the LOAD and STORE channels' bursts instead of the arbiters' own decisions while
    only they request; registers itself as its arbiters' loop's ``train``."""

    def __init__(self, load, store) -> None:
        self.load, self.store = load, store
        self.ddr, self.sram = load.ddr_arb, load.sram
        self.loop = self.ddr.loop
        assert self.sram.loop is self.loop, "a DMA train needs both arbiters on one loop"
        clk = load.clocks
        # the run's constants, unpacked once per train by _Run.go: clock periods and phases (ps),
        # DDR beat bytes and latency (DDR cycles), burst buffers, word and bank bytes, and the
        # bank mask of each one-bank burst
        self.consts = (load.period, load.core_period, clk.ddr.period_ps, clk.core.phase_ps,
                       clk.ddr.phase_ps, load.dom.phase_ps, self.ddr.beat, self.ddr.latency, load.k,
                       load.w, self.sram.bank_words * load.w,
                       tuple((b,) for b in range(len(self.sram.bank_free_ps))))
        self.loop.train = self.run

    def run(self, horizon_ps: float) -> bool:
        """Run every DDR and SRAM decision up to ``horizon_ps`` (ps) if only the DMA channels
        request (True), else nothing (False)."""
        ddr, sram = self.ddr, self.sram
        if ddr.queues[FETCH] or any(r is not None for r in sram.pending[MXU:]):
            return False
        _Run(self, horizon_ps).go()
        ddr.wake()
        sram.wake()
        return True


class _Run:
    """One train: both channels' and both arbiters' state in locals, written back at the end."""

    def __init__(self, train: DmaTrain, horizon_ps: float) -> None:
        self.t, self.horizon_ps = train, horizon_ps

    def go(self) -> None:  # noqa: C901, PLR0912, PLR0915 (one hot loop, kept flat on purpose)
        t, horizon = self.t, self.horizon_ps
        ld, st, ddr, sram, loop = t.load, t.store, t.ddr, t.sram, t.loop
        (p_dma, p_core, p_ddr, ph_core, ph_ddr, ph_dma, beat, lat, k, w, bank_bytes,
         one_bank) = t.consts
        # Clocks.cdc across domains, inlined: edge CDC_EDGES - 1 after the first edge past t
        sync = CDC_EDGES - 1
        dq_r, dq_w = ddr.queues[DMA_READ], ddr.queues[DMA_WRITE]
        pending, bank_free, grants = sram.pending, sram.bank_free_ps, sram.grants
        mem, read_ddr, write_ddr = sram._bytes, ld.ddr_mem.read, ld.ddr_mem.write
        # DdrMemory.read/write inlined for a burst inside one allocated page (nearly every burst;
        # its DDR range was checked at the start edge, plan_bursts); the methods do the rest
        ddr_pages = ld.ddr_mem.pages
        free_ps, last = ddr.free_ps, ddr.last_granted
        # LOAD channel state
        l_b, l_n, l_s, l_j0, l_end = ld._bursts, len(ld._bursts), ld._s, ld._j0, ld._end
        l_r, l_d, l_f, l_data, l_ns = ld._r, ld._d, ld._f, ld._data, ld._sram_posted
        l_e, l_port = ld._e_ps, ld._port_ps       # e_{j-1}; w_{j-1} + D_{j-1} + 1 (port free)
        l_on_ddr, l_on_sram = ld._on_ddr, ld._on_sram
        # STORE channel state
        s_b, s_n, s_s, s_j0, s_end = st._bursts, len(st._bursts), st._s, st._j0, st._end
        s_r, s_d, s_f, s_data, s_ns = st._r, st._d, st._f, st._data, st._sram_posted
        s_on_ddr, s_on_sram = st._on_ddr, st._on_sram
        # each channel's pending SRAM request as locals (visible edge or None, banks, accesses),
        # a SramRequest again at the end
        l_vis = s_vis = l_banks = s_banks = l_acc = s_acc = None
        if pending[LOAD] is not None:
            req = pending[LOAD]
            l_vis, l_banks, l_acc = req.visible_ps, req.banks, req.accesses
        if pending[STORE] is not None:
            req = pending[STORE]
            s_vis, s_banks, s_acc = req.visible_ps, req.banks, req.accesses
        read_bytes = write_bytes = busy = wait = conflicts = conflict_cycles = 0
        # list lengths kept in locals (the lists only grow here): l_r, l_d, l_f, s_d, s_f
        n_lr, n_ld, n_lf, n_sd, n_sf = len(l_r), len(l_d), len(l_f), len(s_d), len(s_f)
        finished = False
        l_want, s_want = ld._want, st._want     # (lst, n, event) an engine waits on, or None
        g = None                # the edge decided last (the loop's now_ps at the end)
        try:
            while not finished:
                # the next edge each arbiter could grant at (as its scheduler would wake)
                if dq_r:
                    t_ddr = dq_r[0].visible_ps
                    if dq_w and dq_w[0].visible_ps < t_ddr:
                        t_ddr = dq_w[0].visible_ps
                    if t_ddr < free_ps:
                        t_ddr = free_ps
                elif dq_w:
                    t_ddr = dq_w[0].visible_ps
                    if t_ddr < free_ps:
                        t_ddr = free_ps
                else:
                    t_ddr = None
                e_l = l_vis                          # grant_edge_ps of each, inlined
                if e_l is not None:
                    for b in l_banks:
                        if bank_free[b] > e_l:
                            e_l = bank_free[b]
                e_s = s_vis
                if e_s is not None:
                    for b in s_banks:
                        if bank_free[b] > e_s:
                            e_s = bank_free[b]
                t_sram = e_l if e_s is None or (e_l is not None and e_l <= e_s) else e_s
                if t_ddr is not None and (t_sram is None or t_ddr < t_sram):
                    if t_ddr > horizon:
                        break
                    g = t_ddr
                    # DDR decision: round robin after the last granted (fetch's queue is empty):
                    # the read unless it is not visible, or the last grant was a read and a
                    # write is visible
                    if dq_r and dq_r[0].visible_ps <= g and (
                            last != DMA_READ or not dq_w or dq_w[0].visible_ps > g):
                        req, last = dq_r.popleft(), DMA_READ
                    else:
                        req, last = dq_w.popleft(), DMA_WRITE
                    addr, nb = req.addr, req.nbytes
                    beats = (addr + nb - 1) // beat - addr // beat + 1
                    done_ps = g + (lat + beats - 1) * p_ddr
                    free_ps = g + beats * p_ddr
                    busy += beats
                    wait += (g - req.visible_ps) // p_ddr
                    off = addr % PAGE_BYTES
                    page = ddr_pages.get(addr // PAGE_BYTES) if off + nb <= PAGE_BYTES else None
                    if last == DMA_READ:
                        read_bytes += nb                                      # LOAD step 2
                        l_data[n_ld] = read_ddr(addr, nb) if page is None else page[off:off + nb]
                        l_d.append(ph_dma + ((done_ps - ph_dma) // p_dma + 1 + sync) * p_dma)
                        n_ld += 1
                    else:
                        write_bytes += nb                                     # STORE step 3
                        if page is None:
                            write_ddr(addr, s_data[n_sf])
                        else:
                            page[off:off + nb] = s_data[n_sf]
                        s_data[n_sf] = None
                        f_ps = ph_dma + ((done_ps - ph_dma) // p_dma + 1 + sync) * p_dma
                        s_f.append(f_ps)                  # buffer j free; an end: c
                        n_sf += 1
                        if n_sf == s_end:
                            st._complete(f_ps)
                            finished = True
                elif t_sram is not None and t_sram <= horizon:
                    g = t_sram
                    # SRAM decision: LOAD then STORE, each if visible and its banks are free: LOAD
                    # iff its earliest edge is this one; STORE too, unless LOAD just took a bank of it
                    take_l = e_l == g
                    take_s = e_s == g and not (take_l and not set(l_banks).isdisjoint(s_banks))
                    took = (((LOAD, l_acc, l_banks, l_vis), (STORE, s_acc, s_banks, s_vis)) if take_s else
                            ((LOAD, l_acc, l_banks, l_vis),)) if take_l else ((STORE, s_acc, s_banks, s_vis),)
                    for requester, acc, banks, vis in took:     # Sram.take without trace
                        end_ps = g + acc * p_core
                        for b in banks:
                            bank_free[b] = end_ps
                        if grants is not None:
                            grants.append((requester, g, acc))
                        if g > vis:
                            conflicts += 1
                            conflict_cycles += (g - vis) // p_core
                    if take_l:                                                # LOAD step 4
                        end_ps = g + l_acc * p_core
                        l_vis = None
                        j = n_lf
                        sram_addr = l_b[j][1]
                        blob = l_data[j]
                        mem[sram_addr:sram_addr + len(blob)] = blob
                        l_data[j] = None
                        l_port = end_ps + p_core
                        f_ps = ph_dma + ((end_ps - ph_dma) // p_dma + 1 + sync) * p_dma
                        l_f.append(f_ps)                  # buffer j free; an end: c
                        n_lf += 1
                        if n_lf == l_end:
                            ld._complete(f_ps)
                            finished = True
                        while n_lr < l_n:                                     # LOAD step 1
                            i = n_lr - k
                            if i < 0:
                                free = l_s
                            elif i < n_lf:
                                free = l_f[i]
                            else:
                                break
                            if n_lr == l_j0:
                                r_ps = l_s
                            else:               # max() spelt out (the hot loop)
                                r_ps = l_r[-1] + p_dma
                                if free > r_ps:
                                    r_ps = free
                            l_r.append(r_ps)
                            l_data.append(None)
                            ddr_addr, _, n = l_b[n_lr]
                            n_lr += 1
                            v = ph_ddr + ((r_ps - ph_ddr) // p_ddr + 1 + sync) * p_ddr
                            dq_r.append(DdrRequest(DMA_READ, ddr_addr, n, v, None, l_on_ddr))
                    if take_s:                                                # STORE step 2
                        end_ps = g + s_acc * p_core
                        s_vis = None
                        j = n_sd
                        ddr_addr, sram_addr, n = s_b[j]
                        s_data[j] = bytes(mem[sram_addr:sram_addr + n])
                        d_ps = ph_dma + ((end_ps - ph_dma) // p_dma + 1 + sync) * p_dma
                        s_d.append(d_ps)
                        n_sd += 1
                        v = ph_ddr + ((d_ps - ph_ddr) // p_ddr + 1 + sync) * p_ddr
                        dq_w.append(DdrRequest(DMA_WRITE, ddr_addr, n, v, None, s_on_ddr))
                else:
                    break
                # LOAD step 3: SRAM write j at e_j = max(d_j, e_{j-1} + 1) once d_j and w_{j-1}
                # are known, visible at max(cdc(e_j), w_{j-1} + D_{j-1} + 1)
                j = l_ns
                if j < n_ld and j <= n_lf:
                    e = l_d[j]
                    if j and l_e + p_dma > e:
                        e = l_e + p_dma
                    l_e = e
                    l_ns = j + 1
                    _, sram_addr, n = l_b[j]
                    b0, b1 = sram_addr // bank_bytes, (sram_addr + n - 1) // bank_bytes
                    l_banks = one_bank[b0] if b0 == b1 else tuple(range(b0, b1 + 1))
                    l_acc = -(-n // w)
                    l_vis = ph_core + ((e - ph_core) // p_core + 1 + sync) * p_core
                    if j and l_vis < l_port:
                        l_vis = l_port
                # STORE step 1: SRAM read j at r_j = max(d_{j-1}, f_{j-K}) once both are known
                j = s_ns
                if j < s_n and j <= n_sd and (j < k or j - k < n_sf):
                    free = s_s if j < k else s_f[j - k]
                    if j == s_j0:
                        r_ps = s_s
                    else:
                        r_ps = s_d[j - 1]
                        if free > r_ps:
                            r_ps = free
                    s_ns = j + 1
                    s_r.append(r_ps)
                    s_data.append(None)
                    _, sram_addr, n = s_b[j]
                    b0, b1 = sram_addr // bank_bytes, (sram_addr + n - 1) // bank_bytes
                    s_banks = one_bank[b0] if b0 == b1 else tuple(range(b0, b1 + 1))
                    s_acc = -(-n // w)
                    s_vis = ph_core + ((r_ps - ph_core) // p_core + 1 + sync) * p_core
                # an engine waits for a list to grow (its walk's end, a buffer): it goes on now
                # (DmaChannel._poke inlined; only the engines set _want, and they do not run
                # during a train, so each channel's wish is read once per train)
                if l_want is not None and len(l_want[0]) >= l_want[1]:
                    ld._want, ev, l_want = None, l_want[2], None
                    ev.succeed()
                    finished = True
                if s_want is not None and len(s_want[0]) >= s_want[1]:
                    st._want, ev, s_want = None, s_want[2], None
                    ev.succeed()
                    finished = True
        finally:
            if g is not None:
                loop.now_ps = g
            pending[LOAD] = None if l_vis is None else SramRequest(LOAD, l_banks, l_acc, l_vis, None, l_on_sram)
            pending[STORE] = None if s_vis is None else SramRequest(STORE, s_banks, s_acc, s_vis, None, s_on_sram)
            ld._sram_posted, st._sram_posted = l_ns, s_ns
            ld._e_ps, ld._port_ps = l_e, l_port
            ddr.free_ps, ddr.last_granted = free_ps, last
            counters = ld.perf.values
            counters["ddr_read_bytes"] += read_bytes
            counters["ddr_write_bytes"] += write_bytes
            counters["ddr_busy_cycles"] += busy
            counters["ddr_arb_wait_cycles"] += wait
            counters["sram_conflicts"] += conflicts
            counters["sram_conflict_cycles"] += conflict_cycles


__all__ = ["DmaTrain"]
