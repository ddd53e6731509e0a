"""cocotb side of the control-path unit benches (top: ctrl_tb_top.sv, 'small' config).

Every check compares the RTL with the timing formulas of docs/architecture.md, evaluated here
with tpusim.arch.timebase (not with the SimPy model):
  * tpu_cdc_sync: a value launched at core edge t is what the DDR-domain consumer acts on at
    exactly the 3rd DDR edge strictly after t (cdc(t -> ddr)), never earlier or later;
  * tpu_async_queue: entry k pushed at core edge p_k is visible to the reader from
    cdc(p_k -> dma); a pop at DMA edge s frees its slot for the writer at cdc(s -> core);
    data in order;
  * tpu_ddr_arbiter (spec v2, pipelined bus): the oldest visible request of one requester is
    granted at the first DDR edge >= v = cdc(launch -> ddr) with the bus free (e >= g_prev +
    B_prev), round robin after the last granted requester (search starts at fetch); beat i's
    command registered at g+i (sampled at g+1+i) at the beat-aligned address, write strobes
    covering exactly [a, a+n); completion (fetch toggle / DMA gray counter) at g+L+B-1, in
    grant order; counters sum(g-v), sum(B).
CTRL_SEED=<n> replays a run.
"""
from __future__ import annotations

import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import Event, ReadOnly, RisingEdge, Timer

from tpusim.arch.config import load_config
from tpusim.arch.timebase import Timebase

CFG = load_config(os.environ.get("CTRL_CONFIG", "small"))
TB = Timebase(CFG)
T0 = 20_000        # model time 0 (multiple of 5000 ps)
L = CFG.ddr_latency_cycles
BEAT = CFG.ddr_beat_bytes
BB = CFG.dma_burst_bytes
Q = CFG.queue_depth


def _seed() -> int:
    s = int(os.environ.get("CTRL_SEED", random.randrange(1 << 30)))
    cocotb.log.info(f"CTRL_SEED={s}")
    return s


def now_ps() -> int:
    return cocotb.utils.get_sim_time("ps")


def idx(dom, t_abs: int) -> int:
    return dom.cycle_of(t_abs - T0)


async def _clock(sig, dom) -> None:
    sig.value = 0
    first = T0 + dom.phase_ps - 4 * dom.period_ps
    await Timer(first, "ps")
    await Clock(sig, dom.period_ps, unit="ps").start(start_high=True)


async def _setup(dut) -> None:
    for s in ("fetch_req_tgl_i", "fetch_addr_i", "rd_req_cnt_i", "rd_addr_i", "rd_bytes_i",
              "wr_req_cnt_i", "wr_addr_i", "wr_bytes_i", "q_push_i", "q_wdata_i", "q_pop_i", "s_d_i"):
        getattr(dut, s).value = 0
    dut.rst_ni.value = 0
    cocotb.start_soon(_clock(dut.clk_core_i, TB.core))
    cocotb.start_soon(_clock(dut.clk_ddr_i, TB.ddr))
    cocotb.start_soon(_clock(dut.clk_dma_i, TB.dma))
    await Timer(T0 - 500, "ps")
    dut.rst_ni.value = 1


# ----------------------------------------------------------------------------- CDC synchroniser
@cocotb.test()
async def cdc_sync_third_edge(dut):
    rng = random.Random(_seed())
    await _setup(dut)
    launches = [(-1, 0)]              # (model launch ps, value)

    async def drive():
        v = 0
        for _ in range(300):
            await RisingEdge(dut.clk_core_i)
            if rng.random() < 0.3:
                v ^= 1
                dut.s_d_i.value = v
                launches.append((now_ps() - T0, v))

    seen = []

    async def watch():
        for _ in range(260):
            await RisingEdge(dut.clk_ddr_i)
            await ReadOnly()
            seen.append((idx(TB.ddr, now_ps()) + 1, int(dut.s_q_o.value)))  # acted on at e+1

    d = cocotb.start_soon(drive())
    await watch()
    d.cancel()
    checked = 0
    for e, q in seen:
        want = 0
        for t, v in launches[1:]:
            if TB.ddr.cycle_of(TB.cdc(t, TB.ddr)) <= e:
                want = v
        assert q == want, f"DDR edge {e}: consumer sees {q}, expected {want}"
        checked += 1
    assert checked > 200 and len(launches) > 50


# ----------------------------------------------------------------------------- async queue
@cocotb.test()
async def async_queue_visibility(dut):
    rng = random.Random(_seed())
    await _setup(dut)
    pushes, pops = [], []             # model ps of the push / pop edges
    full_obs, valid_obs = [], []      # (edge index acted on, value seen during the cycle before)
    n_push = 60

    async def writer():
        k = 0
        await RisingEdge(dut.clk_core_i)
        while True:
            await ReadOnly()
            e = idx(TB.core, now_ps()) + 1            # the edge this cycle's inputs act on
            full = int(dut.q_full_o.value)
            full_obs.append((e, full))
            await Timer(1, "ps")
            push = (not full) and k < n_push and rng.random() < 0.6
            dut.q_push_i.value = int(push)
            dut.q_wdata_i.value = k
            if push:
                pushes.append(TB.core.edge(e))
                k += 1
            await RisingEdge(dut.clk_core_i)

    async def reader():
        k = 0
        await RisingEdge(dut.clk_dma_i)
        while k < n_push:
            await ReadOnly()
            e = idx(TB.dma, now_ps()) + 1
            valid = int(dut.q_rvalid_o.value)
            valid_obs.append((e, valid))
            data = int(dut.q_rdata_o.value) if valid else None
            await Timer(1, "ps")
            pop = bool(valid) and rng.random() < 0.35
            dut.q_pop_i.value = int(pop)
            if pop:
                assert data == k, f"popped {data}, expected entry {k}"
                pops.append(TB.dma.edge(e))
                k += 1
            await RisingEdge(dut.clk_dma_i)

    w = cocotb.start_soon(writer())
    await reader()
    w.cancel()
    vis = [TB.dma.cycle_of(TB.cdc(p, TB.dma)) for p in pushes]
    for e, valid in valid_obs:
        popped = sum(1 for s in pops if TB.dma.cycle_of(s) < e)
        want = sum(1 for v in vis if v <= e) > popped
        assert valid == want, f"DMA edge {e}: rvalid {valid}, expected {int(want)}"
    freed = [TB.core.cycle_of(TB.cdc(s, TB.core)) for s in pops]
    nfull = 0
    for e, full in full_obs:
        occ = sum(1 for p in pushes if TB.core.cycle_of(p) < e) - sum(1 for f in freed if f <= e)
        if e <= TB.core.cycle_of(pushes[-1]):
            assert full == (occ == Q), f"core edge {e}: full {full}, occupancy {occ}"
            nfull += full
    assert nfull > 0, "the queue never filled: the test did not check the full side"


# ----------------------------------------------------------------------------- DDR arbiter
def _gray(x: int) -> int:
    return (x ^ (x >> 1)) & 0xFF


def _ungray(g: int) -> int:
    b = 0
    while g:
        b ^= g
        g >>= 1
    return b & 0xFF


@cocotb.test()
async def ddr_arbiter_round_robin(dut):
    """Pipelined bus (spec v2): fetch (one request at a time, toggle) and two DMA requesters that
    keep up to K requests in flight (slot j mod K + gray request counter, one launch per DMA
    edge, next launch once a completion is seen at cdc(done -> dma))."""
    rng = random.Random(_seed())
    await _setup(dut)
    K = CFG.dma_outstanding
    SB = (BB.bit_length() - 1) + 1                 # SizeBits = log2(BB) + 1
    doms = (TB.core, TB.dma, TB.dma)
    names = ("fetch", "rd", "wr")
    launches = [[] for _ in range(3)]  # per requester: (model launch ps, addr, n)
    done_at = [[] for _ in range(3)]   # DDR edge indices of completions, in order
    done_ev = [Event() for _ in range(3)]
    cmds = []                          # (ddr edge registered, addr, we, wstrb)
    n_per = 30
    slots = {1: ([0] * K, [0] * K), 2: ([0] * K, [0] * K)}

    async def monitor():
        prev = [0, 0, 0]
        await RisingEdge(dut.clk_ddr_i)
        while True:
            await ReadOnly()
            e = idx(TB.ddr, now_ps())
            cur = [int(dut.fetch_done_tgl_o.value), _ungray(int(dut.rd_done_cnt_o.value)),
                   _ungray(int(dut.wr_done_cnt_o.value))]
            for r in range(3):
                d = (cur[r] - prev[r]) & (1 if r == 0 else 0xFF)
                assert d <= 1, f"{names[r]}: {d} completions at one DDR edge {e}"
                if d:
                    done_at[r].append(e)
                    done_ev[r].set()
            prev = cur
            if int(dut.ddr_cmd_valid_o.value):
                cmds.append((e, int(dut.ddr_cmd_addr_o.value), int(dut.ddr_cmd_we_o.value),
                             int(dut.ddr_cmd_wstrb_o.value)))
            await RisingEdge(dut.clk_ddr_i)

    def request(r, j):
        if r == 0:
            return 0x1000_0000 + BB * j, BB
        a = (0x20_0000_0000 + r * 0x10_0000 + BB * j + rng.randrange(0, BB)) & ~0x7
        return a, rng.randrange(1, BB - a % BB + 1)

    async def requester(r):
        dom = doms[r]
        cap = 1 if r == 0 else K
        t = T0 + TB.ddr.edge(0) + rng.randrange(0, 3) * dom.period_ps
        tgl = 0
        for j in range(n_per):
            # in flight: launched - completions seen in the requester's domain
            while True:
                seen = sum(1 for d in done_at[r] if T0 + TB.cdc(TB.ddr.edge(d), dom) <= t)
                if j - seen < cap:
                    break
                if len(done_at[r]) > j - cap:     # the completion exists: wait until seen
                    t = T0 + TB.cdc(TB.ddr.edge(done_at[r][j - cap]), dom)
                    continue
                done_ev[r].clear()
                await done_ev[r].wait()
            if rng.random() < 0.3:                # idle gaps, sometimes long
                t += dom.period_ps * (rng.randrange(1, 4) if rng.random() < 0.7 else rng.randrange(4, 60))
            t = max(t, now_ps() + 1)
            k = -(-(t - T0 - dom.phase_ps) // dom.period_ps)
            t = T0 + dom.edge(k)
            await Timer(t - now_ps(), "ps")
            a, n = request(r, j)
            if r == 0:
                dut.fetch_addr_i.value = a
                tgl ^= 1
                dut.fetch_req_tgl_i.value = tgl
            else:
                addrs, sizes = slots[r]
                addrs[j % K], sizes[j % K] = a, n
                getattr(dut, f"{names[r]}_addr_i").value = sum(x << (40 * i) for i, x in enumerate(addrs))
                getattr(dut, f"{names[r]}_bytes_i").value = sum(x << (SB * i) for i, x in enumerate(sizes))
                getattr(dut, f"{names[r]}_req_cnt_i").value = _gray(j + 1)
            launches[r].append((t - T0, a, n))
            t += dom.period_ps                    # one launch per edge

    mon = cocotb.start_soon(monitor())
    reqs = [cocotb.start_soon(requester(r)) for r in range(3)]
    for c in reqs:
        await c
    while any(len(done_at[r]) < n_per for r in range(3)):
        await RisingEdge(dut.clk_ddr_i)
    await Timer(5 * TB.ddr.period_ps, "ps")
    mon.cancel()

    # reference: docs/architecture.md, "DDR arbiter and memory - pipelined channel"
    nxt = [0, 0, 0]
    free, last = 0, 2
    wait_sum = busy_sum = 0
    exp_cmds, exp_done = [], [[] for _ in range(3)]
    grants = []
    e = 0
    while any(nxt[r] < n_per for r in range(3)):
        if e >= free:
            for i in range(1, 4):
                r = (last + i) % 3
                if nxt[r] < n_per:
                    t, a, n = launches[r][nxt[r]]
                    v = TB.ddr.cycle_of(TB.cdc(t, TB.ddr))
                    if v <= e:
                        B = (a + n - 1) // BEAT - a // BEAT + 1
                        exp_done[r].append(e + L + B - 1)
                        grants.append((r, e))
                        wait_sum += e - v
                        busy_sum += B
                        for b in range(B):
                            ba = (a // BEAT + b) * BEAT
                            strb = sum(1 << q for q in range(BEAT) if a <= ba + q < a + n)
                            exp_cmds.append((e + b, ba, int(r == 2), strb if r == 2 else 0))
                        free, last = e + B, r
                        nxt[r] += 1
                        break
        e += 1
    for r in range(3):
        assert done_at[r] == exp_done[r], f"{names[r]}: done edges {done_at[r]} != {exp_done[r]}"
    assert cmds == sorted(exp_cmds), "beat commands differ from the g+i / address / strobe rule"
    assert int(dut.arb_wait_o.value) == wait_sum
    assert int(dut.ddr_busy_o.value) == busy_sum
    order = [r for r, _ in grants]
    overlap = sum(1 for (r1, g1), (r2, g2) in zip(grants, grants[1:]) if g2 < g1 + L)
    assert wait_sum > 0 and len(set(order)) == 3 and overlap > 0
    cocotb.log.info(f"{len(grants)} grants, {overlap} overlapping, sum(g-v) = {wait_sum}, "
                    f"order {order}")
